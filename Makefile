# The course's two commands: `make book` and `make test`. Both set up .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup exercises book pages test test-book test-notebooks claims test-fast check-sync bench clean release

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

exercises: setup   ## regenerate exercises/ from solutions/
	$(PY) -m course exercises

pages: setup       ## execute each chapter and clear its solutions (cached)
	$(PY) -m course pages

book: pages        ## the executed book, offline, into _build/html
	$(VENV)/bin/jupyter-book build . --keep-going
	$(PY) -m course check-leaks _build/html exercises
	@echo "the book is in _build/html/index.html"

test-book: setup   ## the built book in Chromium, offline (screenshots in _build/screenshots); the student commands in a fresh release
	COURSE_BOOK_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/browser tests/docs

check-sync: setup
	$(PY) -m course check-sync

test: setup        ## every test: generation, graders' self-test, sandbox, batch
	$(PY) -m pytest -q

test-notebooks: setup  ## each chapter's alternative solution: full marks, its notebook runs clean (its claims: make claims)
	$(PY) -m course alternatives

claims: setup      ## each chapter's experiment: worded on 5 seeds x reference/alternative x 1/2 threads, confirmed on 5 held-out seeds (cached in tests/claims/); every claim checked on both
	$(PY) -m course claims

release: setup     ## the student repository, without solutions or hidden graders, into _build/release (leak-checked); PUBLISH=<git remote> pushes it
	$(PY) -m course.release --out _build/release $(if $(PUBLISH),--publish $(PUBLISH))

bench: setup       ## speed figures (printed, never asserted)
	$(PY) benchmarks/bench_grade_one.py

clean:
	rm -rf _build
