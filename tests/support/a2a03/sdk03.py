"""Making the a2a-sdk 0.3 venv and running its scripts, for the tests (Proctor's venv side).

The venv lives in pytest's cache folder and is reused while it imports a 0.3
a2a-sdk; making it takes `pip install "a2a-sdk[http-server]<0.4" uvicorn`
from the package index (about half a minute, once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support.ports import free_port

HERE = Path(__file__).resolve().parent
REQUIREMENTS = ("a2a-sdk[http-server]>=0.3,<0.4", "uvicorn")
_CHECK = "import a2a, importlib.metadata as m, uvicorn; print(m.version('a2a-sdk'))"


def venv_python(root: Path) -> Path:
    return root / "bin" / "python"


def _version(python: Path) -> str | None:
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", _CHECK], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_venv(root: Path) -> Path:
    """The python of a venv with a2a-sdk 0.3 in `root`, made or reused."""
    python = venv_python(root)
    version = _version(python)
    if version and version.startswith("0.3"):
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", *REQUIREMENTS],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"could not install a2a-sdk 0.3 into {root}:\n{done.stderr[-2000:]}")
    version = _version(python)
    if not (version and version.startswith("0.3")):
        raise RuntimeError(f"the venv in {root} has a2a-sdk {version}, not 0.3")
    return python


def wait_until_up(url: str, proc: subprocess.Popen, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the 0.3 server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + ".well-known/agent-card.json", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the 0.3 server at {url} did not come up within {limit_s} s")


def start_server03(python: Path, log: Path, card_url: str | None = None,
                   streaming: bool = True) -> tuple[subprocess.Popen, str]:
    """The scripted 0.3 agent as a subprocess (its output to `log`), and its URL."""
    port = free_port()
    argv = [str(python), str(HERE / "server03.py"), "--port", str(port)]
    argv += ["--card-url", card_url] if card_url else []
    argv += [] if streaming else ["--no-streaming"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(log, "ab") as out:  # a file, not a pipe: a full pipe would stall the server
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_up(url, proc)
    except RuntimeError:
        proc.kill()
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=1)  # a blocking request in flight would hold it up
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sends(url: str) -> int:
    """How many message sends the scripted server has received so far."""
    with urllib.request.urlopen(url + "_sends", timeout=5) as response:
        return int(json.load(response)["sends"])


def ask03(python: Path, url: str, text: str, data: dict, streaming: bool = True) -> dict:
    """Send one message with the 0.3 client; its final task or message, as 0.3 JSON."""
    argv = [str(python), str(HERE / "client03.py"), url, json.dumps({"text": text, "data": data})]
    argv += [] if streaming else ["--no-streaming"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the 0.3 client failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)
