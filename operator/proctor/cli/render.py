"""`proctor render`: the objects the operator would create for an Evaluation, as YAML."""

from __future__ import annotations

import argparse

from proctor.cli.options import load_evaluation


def add_parser(sub: argparse._SubParsersAction) -> None:
    ren = sub.add_parser("render", help="print, as YAML, the objects the operator would create "
                                        "for an Evaluation: pull Jobs (spec.images.prePull), task "
                                        "ConfigMaps, then Jobs")
    ren.add_argument("-f", "--file", action="append", required=True,
                     help="a YAML file with the Evaluation (and its AgentUnderTest); repeatable")
    ren.add_argument("--items", type=_non_negative, metavar="N",
                     help="only the first N items' Jobs (and their task ConfigMaps); default all")
    ren.add_argument("--runner-image", metavar="IMAGE",
                     help="the operator's default runner image (the chart's image), used when "
                          "spec.runner.image is unset; default proctor-runner:<version>")
    ren.add_argument("--allow-local-endpoints", action="store_true",
                     help="render agents at loopback or link-local addresses, as an operator "
                          "started with --allow-local-endpoints runs them; refused otherwise")
    ren.set_defaults(func=cmd_render)


def cmd_render(args: argparse.Namespace) -> int:
    from proctor.core.spec import LLM_VARIANTS_NOT_RENDERED
    from proctor.k8s.render import agent_of, render, to_yaml
    from proctor.prepare import (
        Refusal,
        check_runnable,
        load_selection,
        plan_items,
        prompt_variants,
    )

    evaluation, agents = load_evaluation(args.file)
    check_runnable(evaluation, on_cluster=True)
    sensitivity = evaluation.spec.prompt_sensitivity
    if sensitivity.enabled and sensitivity.strategy == "llm":
        raise Refusal("PromptSensitivityUnsupported", LLM_VARIANTS_NOT_RENDERED)
    agent = agent_of(evaluation, agents, allow_local=args.allow_local_endpoints)
    selection = load_selection(evaluation)
    variants = prompt_variants(evaluation, selection)
    objects = render(evaluation, agent, selection, plan_items(evaluation, selection, variants),
                     args.items, runner_image_default=args.runner_image, variants=variants)
    print(to_yaml(objects), end="")
    return 0


def _non_negative(text: str) -> int:
    if not text.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if int(text) < 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return int(text)
