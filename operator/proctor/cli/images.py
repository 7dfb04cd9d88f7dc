"""`proctor images build` and `build-demo`: Docker images of SWE-bench rows, built from
source, and of the demo dataset."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from proctor.core.exits import ExitCode, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    images = sub.add_parser("images", help="Docker images: SWE-bench rows' built from source, "
                                           "and the demo dataset's")
    images_sub = images.add_subparsers(dest="images_command", required=True)
    _add_build_demo(images_sub)
    _add_build(images_sub)


def _add_build_demo(images_sub: argparse._SubParsersAction) -> None:
    build_demo = images_sub.add_parser("build-demo", help="build the demo dataset's images "
                                       "offline (Debian's packages via mmdebstrap, then one "
                                       "image per repository version); existing ones are kept")
    build_demo.add_argument("--force", action="store_true", help="rebuild them all")
    build_demo.set_defaults(func=cmd_images_build_demo)


def _add_build(images_sub: argparse._SubParsersAction) -> None:
    build = images_sub.add_parser(
        "build", help="build swebench-compatible images of SWE-bench rows from source "
        "(Debian with the Python of swebench's specs, the repository at the base commit as "
        "/testbed, pinned dependencies from PyPI), tagged with each row's image name; "
        "existing ones are kept")
    build.add_argument("-d", "--dataset", "--dataset_name", default="SWE-bench/SWE-bench_Verified",
                       help="hub dataset id, short name or alias (verified, lite, full, "
                            "multilingual, ...), or a .json/.jsonl/.parquet file")
    build.add_argument("-i", "--instance", "--instance_ids", nargs="+", action="extend",
                       metavar="ID", help="only these rows (default: every row, or with "
                                          "--source, every row whose repository it holds)")
    build.add_argument("--source", help="where the repositories come from: a git bundle or "
                                        "repository, or a folder of them (owner__name.bundle, "
                                        "owner/name.git, ...); default: PROCTOR_REPO_MIRROR, "
                                        "else GitHub")
    build.add_argument("--platform", help="linux/amd64 or linux/arm64; images build natively, "
                                          "so only this machine's (the default)")
    build.add_argument("--registry", default="", help="tag under this registry instead "
                                                      "(as runner.instanceImageRegistry)")
    build.add_argument("--force", action="store_true", help="rebuild images that exist")
    build.set_defaults(func=cmd_images_build)


def cmd_images_build_demo(args: argparse.Namespace) -> int:
    from proctor.sandboxes.demo_images import build_demo_images
    from proctor.sandboxes.docker import START_DOCKER, connect

    client, problem = connect()
    if client is None:
        raise UsageError(f"{problem}; {START_DOCKER}")
    built = build_demo_images(client, force=args.force)
    print(f"Built {len(built)} images" if built else "The demo images are all here")
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    from proctor.cli.eval_options import dataset_name
    from proctor.datasets import load
    from proctor.sandboxes.docker import START_DOCKER, connect
    from proctor.sandboxes.images.build import build_images, source_of
    from proctor.sandboxes.images.debian import native_arch

    source = Path(args.source) if args.source else None
    if source is not None and not source.exists():
        raise UsageError(f"--source {args.source}: no such file or folder")
    native = f"linux/{native_arch()}"
    if args.platform and args.platform != native:
        raise UsageError(f"--platform {args.platform}: images are built natively, and this "
                         f"machine is {native}; build them on a {args.platform} machine")
    name = dataset_name(args.dataset)
    rows = list(load(name, instance_ids=args.instance or (), max_rows=-1).instances)
    if source is not None and not args.instance:
        rows = [row for row in rows if source_of(row, source) is not None]
        if not rows:
            raise UsageError(f"no row of {args.dataset} has its repository in {source}")
        print(f"{len(rows)} rows of {args.dataset} have their repository in {source}")
    client, problem = connect()
    if client is None:
        raise UsageError(f"{problem}; {START_DOCKER}")
    results = build_images(client, rows, source=source, registry=args.registry,
                           force=args.force)
    print("\n".join(_build_table(results)))
    failed = [r for r in results if r.status == "failed"]
    return ExitCode.ITEM_ERRORS if failed else 0


def _build_table(results: Sequence) -> list[str]:
    from proctor.sandboxes.images.build import megabytes

    lines = ["", f"{'instance':32} {'status':7} {'seconds':>8} {'size':>9}  image"]
    for r in results:
        seconds = f"{r.seconds:8.0f}" if r.status == "built" else f"{'':8}"
        size = megabytes(r.size_bytes) if r.size_bytes else ""
        lines.append(f"{r.instance_id:32} {r.status:7} {seconds} {size:>9}  {r.image}")
    built = [r for r in results if r.status == "built"]
    counts = {s: sum(r.status == s for r in results) for s in ("built", "kept", "failed")}
    total = sum(r.size_bytes or 0 for r in results if r.status != "failed")
    lines.append(f"\n{counts['built']} built ({sum(r.seconds for r in built):.0f} s), "
                 f"{counts['kept']} kept, {counts['failed']} failed; {total / 1e9:.2f} GB in "
                 f"all (layers shared between images are counted once per image)")
    lines += [f"  {r.error}" for r in results if r.status == "failed"]
    return lines
