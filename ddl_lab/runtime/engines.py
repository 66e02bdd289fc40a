"""Spark and Ray on one machine: are they here, and starting them (lessons 04 and 11).

Both are the optional extra ``engines`` (``pip install -e ".[engines]"``, ``make engines``);
PySpark also needs a Java runtime 17 or newer. ``missing(engine)`` says what is absent and
how to install it (None when the engine can run); ``spark_session`` starts one local Spark
(no web UI, the driver on 127.0.0.1, this interpreter for its Python workers); ``start_ray``
one local Ray instance (no dashboard).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = ["INSTALL", "JAVA_INSTALL", "java_problem", "missing", "require", "spark_session",
           "start_ray"]

INSTALL = 'pip install -e ".[engines]"   (or: make engines)'
JAVA_INSTALL = ("sudo apt-get install openjdk-17-jre-headless (Debian/Ubuntu), "
                "brew install openjdk@17 (macOS), or any Java 17+ on PATH or in JAVA_HOME")
_MODULES = {"spark": "pyspark", "ray": "ray"}


def java_problem() -> str | None:
    """Why PySpark cannot start a JVM here (none, or older than 17), or None."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        return f"no Java runtime (PySpark needs Java 17 or newer). Install one: {JAVA_INSTALL}"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`{java} -version` failed ({e}). Install Java 17+: {JAVA_INSTALL}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(m.group(1)) if m else 0
    major = int(m.group(2) or 0) if major == 1 else major          # "1.8.0" is Java 8
    if major < 17:
        return f"{java} is Java {major or '?'}; PySpark needs 17 or newer. Install: {JAVA_INSTALL}"
    return None


def missing(engine: str) -> str | None:
    """Why ``engine`` ('spark' or 'ray') cannot run here, with how to fix it; None if it can."""
    if engine not in _MODULES:
        raise ValueError(f"unknown engine {engine!r}: use 'spark' or 'ray'")
    if importlib.util.find_spec(_MODULES[engine]) is None:
        return f"{_MODULES[engine]} is not installed (the optional extra): {INSTALL}"
    return java_problem() if engine == "spark" else None


def require(engine: str) -> None:
    """RuntimeError saying what to install when ``engine`` cannot run here."""
    why = missing(engine)
    if why:
        raise RuntimeError(f"{engine} cannot run here: {why}")


def spark_session(master: str = "local[2]", app: str = "ddl-lab") -> Any:
    """The local Spark session (started once, then reused), or RuntimeError saying what to
    install. Its Python workers run this interpreter and import the course from PYTHONPATH."""
    require("spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = str(Path(__file__).resolve().parents[2])
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in paths if p])
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_ray(num_cpus: int = 2) -> float:
    """``ray.init`` of a local Ray (no dashboard) unless one runs; the seconds it took."""
    require("ray")
    import ray
    t0 = time.perf_counter()
    for attempt in range(2):     # Ray waits 30 s (fixed) for its raylet: a busy machine may miss it
        if ray.is_initialized():
            break
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, runtime_env={"env_vars": {
                         "PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
        except Exception as e:
            ray.shutdown()
            if attempt or "timed out during startup" not in str(e):
                raise
    return time.perf_counter() - t0
