# What the student process can see and do to its own sandbox.
import ctypes
import os
import tempfile

libc = ctypes.CDLL(None, use_errno=True)


def status_fields():
    keep = ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Uid")
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f) if k in keep}


def try_unshare(flags):
    """0 if unshare(flags) worked (it must not, for a new user or mount namespace)."""
    return libc.unshare(flags)


def visible_pids():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())


def leave_and_look(tag):
    """What earlier submissions left in the temporary folder; then leave something too."""
    folder = tempfile.gettempdir()
    seen = sorted(f for f in os.listdir(folder) if f.startswith("left-by-"))
    with open(os.path.join(folder, f"left-by-{tag}"), "w") as f:
        f.write(tag)
    return seen


def nap(seconds):
    import time
    time.sleep(seconds)
