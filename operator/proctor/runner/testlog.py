"""The test log on a cluster, kept where the test step cannot rewrite it.

In a work item's pod the test step runs as root in the task's image, and the eval script
runs code the agent's patch controls. Whatever that code can write, it can rewrite after
the fact: a file on a volume the test step mounts writable is no record. The one-machine
sandboxes capture the eval script's stdout outside it; in a pod, the `test-log` step (a
native sidecar of the runner image, running as another user) does the same:

* it makes a named pipe on the volume the test step writes its outputs to, and run.sh
  sends the eval script's output into it (PROCTOR_TEST_LOG);
* it copies what comes through to a volume of its own, which the test step does not
  mount and the grade step mounts read-only, and marks the copy complete when the pipe
  closes (every writer gone: the eval script ended, or the test step's container did).

A pipe can only be appended to: code of the patch can add lines to the log as it can
print them, never take back what the tests printed. The grade step then takes the test
step's outputs (TEST_STEP_OUTPUTS, regular files only) from its volume, as a sandbox
brings them back, and the log from the kept copy.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from proctor.runner.workdir import WorkDir, bring_back

LOG_LIMIT_BYTES = 256 * 1024 * 1024
"""Past this, the rest of the output is read and dropped (the log's volume is bounded)."""
COMPLETE = "complete"
"""The file, beside the kept log, that says the pipe closed."""
WAIT_SECONDS = 30.0
"""How long the grade step waits for the kept copy to be complete once the test step
ended (it closes within milliseconds of the test step's container)."""


def keep(fifo: Path, out: Path, limit: int = LOG_LIMIT_BYTES) -> None:
    """Make the pipe, copy what comes through it to ``out``, mark it complete. A restart
    after that (a native sidecar is restarted when it exits) leaves the copy alone."""
    done = out.parent / COMPLETE
    if done.exists():
        return
    if not fifo.exists():
        os.mkfifo(fifo)
        # The test step runs as root without CAP_DAC_OVERRIDE: it writes by permission.
        fifo.chmod(0o622)
    kept = 0
    with fifo.open("rb") as source, out.open("wb") as sink:  # waits for a writer
        while chunk := source.read(65536):
            if kept < limit:
                sink.write(chunk[:limit - kept])
            kept += len(chunk)
    if kept > limit:
        with out.open("ab") as sink:
            sink.write(f"\n[proctor: {kept - limit} more bytes of output dropped]\n".encode())
    done.write_text(f"{kept}\n")


def serve(fifo: Path, out: Path) -> None:
    """`proctor runner keep-log`: keep the log, then wait to be stopped with the pod (a
    native sidecar that exits is restarted)."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    keep(fifo, out)
    while True:
        signal.pause()


def collect(work: WorkDir, test_dir: Path, kept_log: Path,
            wait_seconds: float = WAIT_SECONDS) -> str | None:
    """Bring the test step's outputs and the kept log into the work folder for grading;
    why the log cannot be trusted, if it cannot. Run once the test step has ended."""
    bring_back(test_dir, work)
    (work / "test_output.txt").unlink(missing_ok=True)
    if not (work / "eval_exit").exists():
        return None  # the eval script never ran: no log is expected
    done = kept_log.parent / COMPLETE
    deadline = time.monotonic() + wait_seconds
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not done.exists():
        return (f"the test log was not complete {wait_seconds:.0f} s after the test step "
                f"ended")
    (work / "test_output.txt").write_bytes(kept_log.read_bytes())
    return None
