"""`proctor images build`'s pure part: swebench's specs as data, a row's image plan, the
one line a failed build is reported in, and the command's refusals (exit 2, one line).

The builds themselves, on a real daemon, are in tests/e2e/test_real_rows.py.
"""

from __future__ import annotations

from functools import cache

import pytest

from proctor.cli.main import main
from proctor.core.model import Instance
from proctor.datasets import load
from proctor.sandboxes.images import specs
from proctor.sandboxes.images.debian import ImageBuildError, Rootfs, mmdebstrap_command
from proctor.sandboxes.images.plan import failure_line, plan_image
from support.paths import VERIFIED_PARQUET, shared

PARQUET = VERIFIED_PARQUET


@cache
def verified() -> dict[str, Instance]:
    return load(str(shared(PARQUET)), max_rows=-1).by_id


def test_the_specs_name_their_source_and_cover_every_verified_row():
    assert "swebench 4.1.0" in specs.source()
    missing = [i.instance_id for i in verified().values()
               if specs.spec_for(i.repo, i.version) is None]
    assert missing == []


def test_the_specs_pin_what_swebench_pinned():
    pytest45 = specs.spec_for("pytest-dev/pytest", "4.5")
    assert pytest45 is not None and pytest45.python == "3.9"
    assert "pluggy==0.11.0" in pytest45.pip_packages
    flask = specs.spec_for("pallets/flask", "2.3")
    assert flask is not None and flask.python == "3.11" and flask.packages == "requirements.txt"
    assert specs.spec_for("pytest-dev/pytest", "0.1") is None


def test_requirements_are_assembled_as_swebench_does():
    files = {"requirements/dev.txt": "# pinned\n-r tests.txt\n-e .\ntox==4.4.6\n",
             "requirements/tests.txt": "pytest==7.2.2\n.[test]\ntypes-pkg_resources==0.1\n"}
    found = specs.requirements("pallets/flask", files.get)
    assert found == ("requirements/dev.txt", "pytest==7.2.2\ntypes-setuptools\n\ntox==4.4.6\n")
    assert specs.requirements("pallets/flask", {}.get) is None


def test_a_pytest_row_is_python_39_on_bullseye_with_its_pins_and_the_conda_stand_ins():
    row = verified()["pytest-dev__pytest-5262"]
    plan = plan_image(row, "amd64", tagged=False)
    assert plan.image == row.image
    assert plan.rootfs.suite == "bullseye" and plan.rootfs.image.endswith("bullseye-amd64")
    text = plan.dockerfile()
    assert "COPY opt /opt" in text and "pluggy==0.11.0" in text
    assert "ENV SETUPTOOLS_SCM_PRETEND_VERSION=4.5.0" in text
    assert "python -m pip install -e ." in plan.setup and "commit --allow-empty" in plan.setup
    # The environment comes before the repository, so rows of one version share it.
    assert text.index("pluggy") < text.index("COPY testbed")
    assert "PRETEND" not in plan_image(row, "amd64").dockerfile()


def test_a_registry_retags_the_image_as_the_runner_pulls_it():
    row = verified()["pytest-dev__pytest-5262"]
    plan = plan_image(row, "arm64", registry="mirror.local:5000")
    assert plan.image == f"mirror.local:5000/{row.image}"
    assert plan.rootfs.arch == "arm64"


def test_the_flask_row_installs_its_requirements_file_on_bookworm():
    row = verified()["pallets__flask-5014"]
    with pytest.raises(ImageBuildError, match=r"^pallets__flask-5014: its requirements"):
        plan_image(row, "amd64")
    plan = plan_image(row, "amd64", requirements=("requirements/dev.txt", "tox==4.4.6\n"))
    assert plan.rootfs.suite == "bookworm"
    assert "COPY requirements.txt" in plan.dockerfile() and plan.requirements == "tox==4.4.6\n"


@pytest.mark.parametrize("instance_id, reason", [
    ("django__django-11099", "needs Python 3.6, which no Debian release ships"),
    ("matplotlib__matplotlib-23299", "conda environment.yml"),
])
def test_rows_that_cannot_be_built_here_are_refused_in_one_line(instance_id, reason):
    with pytest.raises(ImageBuildError) as caught:
        plan_image(verified()[instance_id], "amd64")
    message = str(caught.value)
    assert message.startswith(f"{instance_id}: ") and reason in message
    assert "\n" not in message


def test_a_failed_pip_install_names_the_row_and_the_package():
    log = ("Step 4/9 : RUN python -m pip install numpy==2.1.0\nERROR: Could not find a version "
           "that satisfies the requirement numpy==2.1.0 (from versions: 1.0)\nERROR: No "
           "matching distribution found for numpy==2.1.0\n")
    assert failure_line("a__b-1", "3.9", log) == (
        "a__b-1: PyPI serves no numpy==2.1.0 for Python 3.9")
    assert failure_line("a__b-1", "3.9", "  Failed building wheel for lxml\n") == (
        "a__b-1: lxml did not build for Python 3.9")
    assert failure_line("a__b-1", "3.9", "x\nsome error here\ny\n") == "a__b-1: some error here"


def test_the_rootfs_is_one_mmdebstrap_call():
    rootfs = Rootfs("proctor/x:1", "bullseye", ("python3", "git"), arch="arm64")
    assert mmdebstrap_command(rootfs, "/tmp/r.tar") == [  # type: ignore[arg-type]
        "mmdebstrap", "--quiet", "--variant=minbase", "--include=python3,git",
        "--architectures=arm64", "bullseye", "/tmp/r.tar"]


@pytest.mark.parametrize("extra, message", [
    (["--platform", "linux/s390x"], "--platform linux/s390x: images are built natively"),
    (["--source", "/nonexistent/repos"], "--source /nonexistent/repos: no such file"),
    (["-i", "nobody__nothing-1"], "instance ids not in the dataset: nobody__nothing-1"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    assert main(["images", "build", "-d", str(shared(PARQUET)), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
