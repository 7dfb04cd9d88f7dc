"""The `llm` strategy: a model rewords a problem statement's prose, through litellm.

    prompt (pure) -> one completion -> parse the JSON reply (pure) -> check each variant
    (pure) -> retry a bounded number of times -> a `Generation`: ok, or failed with why

The reply is one JSON object with one field per variant, so a multi-paragraph statement
comes back whole (never split on lines). Every variant is checked against the original
(`check`): it must differ from the original and from the others, keep every protected
span (see `spans`) verbatim, and stay within `LENGTH_BOUNDS` of the original's length. A
generation that still fails after `ATTEMPTS` tries is recorded as failed with its reason;
it is never replaced by the original. A model that cannot be reached at all (refused
connection, unknown model, bad key) raises `ModelUnreachable` at once: the run stops.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from proctor.core.exits import NotRun
from proctor.variants.spans import protected_spans

PROMPT_VERSION = "1"
"""Bumped whenever the prompt or the checks change: stored variants of another version
are not reused."""
ATTEMPTS = 3
TIMEOUT_S = 120.0
LENGTH_BOUNDS = (0.6, 1.8)
"""A variant's length as a share of the original's: below, prose was dropped; above, the
model added its own."""

_SYSTEM = (
    "You reword software issue reports so that an engineer reading them learns exactly the "
    "same facts in different words. Rules:\n"
    "- Reword only the prose: change word choice, sentence structure and tone.\n"
    "- Copy verbatim, character for character: code blocks (with their fences and "
    "indentation), tracebacks, command output, file paths, identifiers (names of "
    "functions, classes, variables, options), numbers, URLs, and anything in quotes or "
    "backticks.\n"
    "- Keep every fact, step and example; add nothing, drop nothing.\n"
    "- Each variation must differ from the original and from the other variations.\n"
    "Reply with one JSON object and nothing else. Its keys are {keys}; each value is one "
    "complete reworded report as a single JSON string (line breaks written as \\n).")


class ModelUnreachable(NotRun):
    """The variants' model cannot be reached at all: nothing was run (exit 3)."""


class InvalidReply(ValueError):
    """A reply that is not the JSON object asked for; the message says what is wrong."""


@dataclass(frozen=True)
class ModelSettings:
    """Which model writes the variants, and how to reach it (keys come from the
    environment, as litellm reads them)."""

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a log line
    timeout_s: float = TIMEOUT_S
    attempts: int = ATTEMPTS


@dataclass
class Generation:
    """One task's variants from the model, or why there are none."""

    texts: list[str] = field(default_factory=list)
    reason: str | None = None
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None


def settings_for(model: str, api_base: str | None = None) -> ModelSettings:
    """The model string, with `api_base` (promptSensitivity.apiBase), else an endpoint
    from PROCTOR_VARIANTS_API_BASE when set (else litellm's own: OPENAI_API_BASE,
    OLLAMA_API_BASE, ...); a key from PROCTOR_VARIANTS_API_KEY when set (a cluster's
    variants Job sets it from the Evaluation's Secret), else litellm's own variable."""
    return ModelSettings(model, api_base or os.environ.get("PROCTOR_VARIANTS_API_BASE") or None,
                         os.environ.get("PROCTOR_VARIANTS_API_KEY") or None)


def keys(n: int) -> list[str]:
    return [f"variant_{i}" for i in range(1, n + 1)]


def messages(text: str, n: int) -> list[dict[str, str]]:
    """The chat asking for `n` rewordings of `text` (pure)."""
    names = ", ".join(f'"{k}"' for k in keys(n))
    return [{"role": "system", "content": _SYSTEM.format(keys=names)},
            {"role": "user", "content": f"Write {n} variations of this report:\n\n{text}"}]


def parse_reply(content: str | None, n: int) -> list[str]:
    """The `n` variant texts of a reply, or InvalidReply naming what is wrong (pure)."""
    body = (content or "").strip()
    if not body:
        raise InvalidReply("empty reply")
    fenced = re.fullmatch(r"```(?:json)?\s*\n(.*)\n```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidReply(f"reply is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InvalidReply(f"reply is JSON but not an object with {', '.join(keys(n))}")
    missing = [k for k in keys(n) if not isinstance(data.get(k), str) or not data[k].strip()]
    if missing:
        raise InvalidReply(f"reply lacks {', '.join(missing)} (or they are not text)")
    return [data[k] for k in keys(n)]


def _core(span: str) -> str:
    """An inline span without the punctuation that only ends its sentence."""
    if "\n" in span or span[:1] in "`\"'":
        return span
    return span.strip("(),.;:!?") or span


def check(original: str, texts: list[str]) -> list[list[str]]:
    """Each variant's problems (empty when it passes), in order (pure)."""
    spans = protected_spans(original)
    low, high = LENGTH_BOUNDS
    out: list[list[str]] = []
    for i, text in enumerate(texts):
        problems = []
        if text.strip() == original.strip():
            problems.append("same as the original")
        earlier = [j for j in range(i) if texts[j].strip() == text.strip()]
        if earlier:
            problems.append(f"same as variant_{earlier[0] + 1}")
        lost = [s for s in spans if _core(s) not in text]
        if lost:
            more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            problems.append(f"protected span changed or missing: {_short(lost[0])}{more}")
        ratio = len(text) / max(1, len(original))
        if not low <= ratio <= high:
            problems.append(f"length {ratio:.0%} of the original (allowed "
                            f"{low:.0%} to {high:.0%})")
        out.append(problems)
    return out


def _short(span: str) -> str:
    one = " ".join(span.split())
    return repr(one if len(one) <= 60 else one[:57] + "...")


def _litellm() -> Any:
    # Imported here: slow to import, and only this strategy needs it. Its model price
    # list is the one it ships with: no download at import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # its own "Give Feedback" lines on every error
    return litellm


def generate(text: str, n: int, settings: ModelSettings) -> Generation:
    """`n` checked rewordings of `text`, or a failed Generation after `settings.attempts`
    tries; ModelUnreachable when the model cannot be reached at all."""
    gen = Generation()
    for attempt in range(1, settings.attempts + 1):
        gen.attempts = attempt
        try:
            response = _litellm().completion(model=settings.model, messages=messages(text, n),
                                             api_base=settings.api_base,
                                             api_key=settings.api_key,
                                             timeout=settings.timeout_s, temperature=0.7,
                                             num_retries=0, max_retries=0)
        except Exception as exc:  # classified: unreachable stops, the rest is retried
            _stop_if_unreachable(exc, settings)
            gen.reason = f"model call failed: {_one_line(exc, settings.api_key)}"
            continue
        _add_usage(gen, response)
        try:
            texts = parse_reply(response.choices[0].message.content, n)
        except InvalidReply as exc:
            gen.reason = f"invalid reply: {exc}"
            continue
        problems = check(text, texts)
        bad = [f"variant_{i + 1}: {'; '.join(p)}" for i, p in enumerate(problems) if p]
        if not bad:
            gen.texts, gen.reason = texts, None
            return gen
        gen.reason = "checks failed: " + " | ".join(bad)
    return gen


def _stop_if_unreachable(exc: Exception, settings: ModelSettings) -> None:
    """Raise ModelUnreachable for errors no retry can cure (no connection, no such model,
    no key); let the others (timeouts, server errors, bad replies) be retried."""
    litellm = _litellm()
    # A timeout, or a statement too long or refused by the model, is this task's failure.
    if isinstance(exc, (litellm.Timeout, litellm.ContextWindowExceededError,
                        litellm.ContentPolicyViolationError)):
        return
    status = getattr(exc, "status_code", None)
    # litellm gives a refused connection status 500 and reports a missing key as a server
    # error; both are for good, unlike a server's own 5xx.
    hopeless = (isinstance(exc, litellm.APIConnectionError)
                or "missing credentials" in str(exc).lower()
                or (isinstance(exc, (litellm.NotFoundError, litellm.AuthenticationError,
                                     litellm.PermissionDeniedError, litellm.BadRequestError))
                    and not (isinstance(status, int) and status >= 500)))
    if hopeless:
        where = f" at {settings.api_base}" if settings.api_base else ""
        why = _one_line(exc, settings.api_key)
        raise ModelUnreachable(
            f"the variants' model {settings.model}{where} cannot be used: {why}; "
            f"nothing was run (start the model's server, correct promptSensitivity.model "
            f"or greenAgentModel, or set its key in the environment)") from None


_MASKED = re.compile(r"\S*\*{3,}\S*")
"""A masked key as providers echo one ("Incorrect API key provided: sk-ab****cdef")."""


def scrub(text: str, key: str | None) -> str:
    """`text` without the key, whole or masked: a failure's reason is kept in the variants
    store and, on a cluster, printed on the variants Job's log (pure)."""
    if key:
        text = text.replace(key, "[key]")
    return _MASKED.sub("[key]", text)


def _one_line(exc: Exception, key: str | None = None) -> str:
    text = scrub(" ".join(str(exc).split()), key) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _add_usage(gen: Generation, response: Any) -> None:
    usage = getattr(response, "usage", None)
    gen.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
    gen.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    gen.cost_usd += float(cost or 0.0)
