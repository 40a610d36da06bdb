"""The service's HTML pages (Jinja2, autoescaped: nothing a student typed or wrote is ever markup)."""
from __future__ import annotations

import jinja2

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
{% if refresh %}<meta http-equiv="refresh" content="{{ refresh }}">{% endif %}
<title>{{ title }} - Attention course submissions</title>
<style>
body{font-family:system-ui,sans-serif;max-width:60rem;margin:1.5rem auto;padding:0 1rem;line-height:1.45}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}
pre{background:#f6f6f6;padding:.75rem;white-space:pre-wrap;overflow-wrap:anywhere}
.error{color:#a00;font-weight:600}.ok{color:#070}nav form{display:inline}
</style></head><body>
<nav>{% if who %}Signed in as <b>{{ who }}</b>
<form method="post" action="/signout"><input type="hidden" name="csrf" value="{{ csrf }}">
<button type="submit">Sign out</button></form>{% endif %}</nav>
<h1>{{ title }}</h1>
{% if error %}<p class="error" role="alert">{{ error }}</p>{% endif %}
{% block body %}{% endblock %}
</body></html>"""

SIGNIN = """{% extends "base" %}{% block body %}
<form method="post" action="/signin">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>Your personal token <input type="password" name="token" autocomplete="off" size="50" required></label>
<button type="submit">Sign in</button>
</form>
<p>Your instructor sent you the token. Keep it to yourself: it is your signature on every submission.</p>
{% endblock %}"""

STUDENT = """{% extends "base" %}{% block body %}
<h2>Hand in a notebook</h2>
<form method="post" action="/submit" enctype="multipart/form-data">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>Assignment <select name="chapter">{% for ch in chapters %}
<option value="{{ ch.name }}">{{ ch.name }}{% if ch.due %} (due {{ ch.due }}){% endif %}</option>{% endfor %}
</select></label>
<label>Notebook (.ipynb) <input type="file" name="notebook" accept=".ipynb" required></label>
<button type="submit">Submit</button>
</form>
<p>Every attempt is kept. Your last graded attempt of an assignment is your grade.</p>
<h2>Your attempts</h2>
{% if attempts %}<table><tr><th>attempt</th><th>assignment</th><th>handed in (UTC)</th><th>status</th>
<th>score</th><th>late penalty</th></tr>
{% for a in attempts %}<tr><td><a href="/submissions/{{ a.id }}">#{{ a.id }}</a></td><td>{{ a.chapter }}</td>
<td>{{ a.when }}</td><td>{{ a.status }}</td><td>{{ a.score }}</td><td>{{ a.penalty }}</td></tr>{% endfor %}
</table>{% else %}<p>None yet.</p>{% endif %}
{% endblock %}"""

SUBMISSION = """{% extends "base" %}{% block body %}
<p>{{ sub.chapter }}, {{ sub.filename }}, handed in {{ sub.when }} UTC by {{ sub.student }}.</p>
<p id="status" data-status="{{ sub.status }}">
{% if sub.status == "queued" %}Queued: {{ place }} submission{{ "s" if place != 1 }} ahead of yours.
{% elif sub.status == "grading" %}Being graded now.
{% else %}Graded: <b id="score">{{ sub.score }}</b>{% endif %}</p>
{% if feedback %}<h2>Feedback</h2><pre id="feedback">{{ feedback }}</pre>{% endif %}
<p><a href="{{ back }}">Back</a></p>
{% endblock %}"""

INSTRUCTOR = """{% extends "base" %}{% block body %}
<p>{{ pending }} submission{{ "s" if pending != 1 }} queued or being graded.</p>
<form method="post" action="/instructor/regrade"><input type="hidden" name="csrf" value="{{ csrf }}">
<button type="submit">Regrade all</button> (after a grader edit: every attempt graded again)</form>
{% for ch in chapters %}
<h2>{{ ch.name }}</h2>
<p>{% if ch.due %}Due {{ ch.due }}.{% else %}No deadline set.{% endif %}
<a href="/instructor/{{ ch.name }}/grades.csv">grades.csv</a> ·
<a href="/instructor/{{ ch.name }}/lms.csv">LMS CSV</a> ·
<a href="/instructor/{{ ch.name }}/report">class report</a> ·
<a href="/instructor/{{ ch.name }}/similarity">similarity report</a> ·
<a href="/instructor/{{ ch.name }}/gradescope.zip">Gradescope autograder</a> ·
<a href="/instructor/{{ ch.name }}/gradebook.db">nbgrader gradebook</a></p>
<table><tr><th>student</th><th>name</th><th>attempts</th><th>last handed in (UTC)</th><th>status</th><th>score</th></tr>
{% for r in ch.rows %}<tr><td><a href="/instructor/students/{{ r.id }}">{{ r.id }}</a></td><td>{{ r.name }}</td>
<td>{{ r.attempts }}</td><td>{{ r.when }}</td><td>{{ r.status }}</td><td>{{ r.score }}</td></tr>{% endfor %}
</table>{% endfor %}
{% endblock %}"""

HISTORY = """{% extends "base" %}{% block body %}
<p><a href="/instructor">Dashboard</a></p>
<table><tr><th>attempt</th><th>assignment</th><th>handed in (UTC)</th><th>status</th><th>score</th>
<th>late penalty</th><th>gradings</th></tr>
{% for a in attempts %}<tr><td><a href="/submissions/{{ a.id }}">#{{ a.id }}</a></td><td>{{ a.chapter }}</td>
<td>{{ a.when }}</td><td>{{ a.status }}</td><td>{{ a.score }}</td><td>{{ a.penalty }}</td><td>{{ a.rounds }}</td></tr>
{% endfor %}</table>
{% endblock %}"""

MESSAGE = """{% extends "base" %}{% block body %}<p><a href="{{ back }}">Back</a></p>{% endblock %}"""

ENV = jinja2.Environment(loader=jinja2.DictLoader({
    "base": BASE, "signin": SIGNIN, "student": STUDENT, "submission": SUBMISSION, "instructor": INSTRUCTOR,
    "history": HISTORY, "message": MESSAGE}), autoescape=True, undefined=jinja2.StrictUndefined)


def render(name: str, **context) -> str:
    context.setdefault("refresh", 0)
    context.setdefault("error", "")
    context.setdefault("who", "")
    context.setdefault("csrf", "")
    return ENV.get_template(name).render(**context)
