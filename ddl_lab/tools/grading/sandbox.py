"""The OS sandbox a submission's notebook runs in (``ddl-lab grade``): bubblewrap.

Inside: the whole file system read-only, with the run's own folder (``WORK``) the one
writable place besides a private ``/tmp``; the course's checks and solutions, the class's
submissions and the grader's output hidden; no network but its own loopback (gloo's
workers talk over it); its own PID, IPC and UTS namespaces, so that everything the learner
started dies with it; a clean environment (no instructor's seed, no grader's variable);
limits on CPU time and memory per process, and the grader's wall-clock limit outside.
bubblewrap works unprivileged through user namespaces (and as root): Debian's package
``bubblewrap`` (``make setup`` installs it where it can). Where no sandbox can be made,
``ddl-lab grade`` refuses unless the instructor passes ``--trust-learner-code``.
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

FLAG = "--trust-learner-code"
CHECK_STUB = '''"""The course's checks are not in the sandbox: a graded run's verdicts are reached by
the judge, outside it (ddl_lab/tools/grading/sandbox.py)."""


def __getattr__(name):
    def judged_elsewhere(*args, **kwargs):
        print(f"check.{name}: judged outside the sandbox when grading")
    return judged_elsewhere
'''


class NoSandbox(RuntimeError):
    """No sandbox can be made here; the message says why and what to do."""


@dataclass(frozen=True)
class Box:
    """What one run's sandbox holds: its folder, what it hides, its limits."""
    work: Path
    hide: tuple[Path, ...] = ()
    cpu_seconds: int = 3600
    memory_bytes: int = 8 << 30


@functools.cache
def why_not() -> str | None:
    """None if a sandbox can be made here, else why not and what to do."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ("bubblewrap (bwrap) is not installed: install Debian's `bubblewrap` "
                "(apt-get install bubblewrap; `make setup` does as root)")
    try:
        probe = subprocess.run([bwrap, *_namespaces(), "--ro-bind", "/", "/", "--dev", "/dev",
                                "--proc", "/proc", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not be started ({e})"
    if probe.returncode != 0:
        return ("bubblewrap cannot make a sandbox here (" + probe.stderr.decode(
            errors="replace").strip()[:300] + "): user namespaces may be disabled "
                "(sysctl kernel.unprivileged_userns_clone=1, or run as root)")
    return None


def _namespaces() -> list[str]:
    return ["--unshare-user-try", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]


def hidden_from_learners(course: Path, *more: Path, checks: tuple[str, ...] = ()
                         ) -> tuple[Path, ...]:
    """What a sandbox hides: the checks (the course's, and the modules ``checks`` of a
    course's own), the solutions, and ``more`` (the submissions, the grader's output)."""
    import importlib.util

    import ddl_lab.check
    own = [importlib.util.find_spec(m) for m in checks]
    return (Path(ddl_lab.check.__file__).resolve().parent, Path(course).resolve() / "solutions",
            *[Path(s.origin).resolve() for s in own if s is not None and s.origin],
            *[Path(p).resolve() for p in more])


def command(box: Box, argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` run in the sandbox ``box`` with exactly the environment ``env``."""
    work = str(box.work.resolve())
    cmd = ["bwrap", *_namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for path in _needed_under_tmp(env):     # a course or an environment that lies in /tmp
        cmd += ["--ro-bind", str(path), str(path)]
    stub = box.work / ".check_stub.py"
    stub.write_text(CHECK_STUB)
    for path in box.hide:
        if not path.exists() or work.startswith(str(path)):
            continue
        if path.is_file():
            cmd += ["--ro-bind", "/dev/null", str(path)]
            continue
        cmd += ["--tmpfs", str(path)]
        if path.name == "check" and (path / "__init__.py").exists():
            cmd += ["--ro-bind", str(stub), str(path / "__init__.py")]
    cmd += ["--bind", work, work, "--chdir", work, "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    return cmd + ["--", *argv]


def _needed_under_tmp(env: dict[str, str]) -> list[Path]:
    """What Python needs that lies under /tmp (hidden by the sandbox's own /tmp): the
    environment, the course's package, the folders on its path — outermost first."""
    import ddl_lab
    tmp = Path("/tmp").resolve()
    wanted = [Path(sys.prefix), Path(sys.base_prefix), Path(ddl_lab.__file__).parents[1],
              *[Path(p) for p in sys.path if p],
              *[Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    found: list[Path] = []
    for path in sorted({p.resolve() for p in wanted if p.exists()}, key=lambda p: len(p.parts)):
        if tmp in path.parents and not any(f == path or f in path.parents for f in found):
            found.append(path)
    return found


def limits(box: Box) -> Callable[[], None]:
    """The child's limits (CPU seconds and memory per process), set before bwrap starts."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (box.cpu_seconds, box.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_DATA, (box.memory_bytes, box.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def environment(work: Path, token_env: str, token: str) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the grader's but paths and a locale. Its
    temporary files go to its own /tmp (short paths for the workers' Unix sockets); the
    checks' files, to ``work`` (``DDL_LAB_SHARED_DIR``, the judge's ``tempfile``)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work / "home"),
           "TMPDIR": "/tmp", "LANG": os.environ.get("LANG", "C.UTF-8"),
           token_env: token, "DDL_LAB_PROGRESS": "off", "MPLBACKEND": "Agg",
           "PYTHONDONTWRITEBYTECODE": "1", "DDL_LAB_SHARED_DIR": str(work / "shm"),
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONNOUSERSITE": "1"}
    for name in ("PYTHONPATH", "DDL_LAB_START_METHOD", "VIRTUAL_ENV"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    for sub in ("home", "tmp", "shm"):
        (work / sub).mkdir(exist_ok=True)
    _share_caches(work / "home")
    return env


def _share_caches(home: Path) -> None:
    """The grader's cached digits split (``ml.data.cache_dir``), copied into the sandbox's
    home: its kernel and workers read it instead of each importing scikit-learn to compute
    it again (1.5 CPU-s a process). Data go in; nothing comes out."""
    import shutil

    from ddl_lab.ml.data import cache_dir
    found = sorted(cache_dir().glob("digits-split-*.npz")) if cache_dir().is_dir() else []
    if found:
        into = home / ".cache" / "ddl_lab"
        into.mkdir(parents=True, exist_ok=True)
        for f in found:
            shutil.copyfile(f, into / f.name)

