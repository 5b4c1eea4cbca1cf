"""Ollama's request bodies (``/api/chat``, ``/api/generate``), read and checked into the same
``Job`` as OpenAI's (``api.py``): every fault an ``ApiError`` naming the field as Ollama writes it
(``options.temperature``, ``messages[2].images``), never a silent default.

``format`` is ``"json"`` (a JSON object) or a JSON Schema; localguide's ``regex``, ``grammar``,
``choice`` and ``stats`` come as top-level fields, as on the OpenAI routes. Options that only
place the model (threads, GPU layers, memory mapping, ``keep_alive``) are accepted and have no
effect: one model stays loaded as ``serve`` placed it. Options that would change the text and
that localguide does not implement (penalties, mirostat, ...) are refused unless neutral.
``/api/generate`` renders the prompt (and ``system``) through the model's chat template, as Ollama
does, unless ``raw``; a request's own ``template`` is refused (no request reaches template code).
"""

from __future__ import annotations

from ..sampling import DEFAULT, Sampling
from .api import (ApiError, Job, Limits, _bool, _int, _messages, _number, _stop, _texts, _tools, extension_constraint,
                  smc_field)

# (placement of the model: serve's own options decide it)
_PLACEMENT = {"numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only",
              "use_mmap", "use_mlock", "embedding_only", "num_thread", "num_keep"}
# (sampling localguide does not implement: accepted at the value that leaves the text alone)
_NEUTRAL = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "mirostat": 0,
            "tfs_z": 1.0, "typical_p": 1.0, "penalize_newline": False}
_SAMPLING = {"temperature", "top_k", "top_p", "min_p", "seed", "num_predict", "stop", "num_ctx", "repeat_last_n",
             "mirostat_tau", "mirostat_eta"}
_EXTENSIONS = {"regex", "grammar", "choice", "stats", "smc"}
_CHAT = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"} | _EXTENSIONS
_GENERATE = {"model", "prompt", "suffix", "system", "template", "context", "raw", "images", "format", "options",
             "stream", "keep_alive", "think"} | _EXTENSIONS


def parse_chat(body, limits: Limits, texts: bool = True) -> Job:
    """``POST /api/chat``'s body."""
    body = _start(body, texts, _CHAT)
    job = Job(messages=_messages(_chat_messages(body.get("messages"))))
    _common(body, job, limits)
    if body.get("tools") == []:  # (Ollama's client sends an empty list for none)
        body = {k: v for k, v in body.items() if k != "tools"}
    _tools(body, job)
    if job.tools is not None and job.constraint is not None:
        raise ApiError("tools cannot be combined with format, regex, grammar or choice: the answer is text or "
                       "calls", "tools")
    smc_field(body, job, limits)
    return job


def parse_generate(body, limits: Limits, texts: bool = True) -> Job:
    """``POST /api/generate``'s body: a chat of one user message (and ``system``), or with ``raw``
    the prompt completed as written."""
    body = _start(body, texts, _GENERATE)
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ApiError("prompt: expected a non-empty string (a request without one, which loads a model in "
                       "Ollama, has nothing to do here)", "prompt")
    for key, empty in (("suffix", ("",)), ("template", ("",)), ("context", ([],)), ("images", ([],))):
        if body.get(key) is not None and body[key] not in empty:
            raise ApiError(f"{key} is not supported" + (" (the model's own chat template is used; raw: true for "
                                                        "none)" if key == "template" else ""), key)
    raw = _bool(body, "raw", False)
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise ApiError("system: expected a string", "system")
    if raw:
        if system:
            raise ApiError("system needs the chat template: not with raw", "system")
        job = Job(prompt=prompt)
    else:
        job = Job(messages=_messages(([{"role": "system", "content": system}] if system else [])
                                     + [{"role": "user", "content": prompt}]))
    _common(body, job, limits)
    job.heal = raw
    smc_field(body, job, limits)
    return job


def _start(body, texts: bool, known: set) -> dict:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    if texts:
        _texts(body, ("messages", "prompt", "system", "tools", "options"))
    for key in body:
        if key not in known:
            raise ApiError(f"unknown field {key!r} (localguide's extensions: regex, grammar, choice, stats, smc)", key)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError("model: expected a string", "model")
    think = body.get("think")
    if think not in (None, False):
        raise ApiError("think is not supported (a model's reasoning: the OpenAI route's after, e.g. '</think>')",
                       "think")
    return body


def _chat_messages(messages):
    """Ollama's messages as the chat code reads them: text only (their calls are checked with
    OpenAI's, ``_messages``: arguments may be objects)."""
    if not isinstance(messages, list):
        return messages  # (``_messages`` says what was expected)
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        if m.get("images"):
            raise ApiError(f"messages[{i}].images: images are not supported", "messages")
    return [{k: v for k, v in m.items() if k != "images"} if isinstance(m, dict) else m for m in messages]


def _common(body: dict, job: Job, limits: Limits) -> None:
    options = body.get("options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ApiError("options: expected an object", "options")
    for key, value in options.items():
        if key in _PLACEMENT or key in _SAMPLING or value is None:
            continue
        if key in _NEUTRAL:
            if value != _NEUTRAL[key] or isinstance(value, bool) != isinstance(_NEUTRAL[key], bool):
                raise ApiError(f"options.{key} is not supported (leave it out or {_NEUTRAL[key]!r})".replace(
                    "False", "false"), "options")
            continue
        raise ApiError(f"options.{key}: unknown option", "options")
    o = _Options(options)
    temperature = o.number("temperature", DEFAULT.temperature, 0.0, 2.0)
    top_p = o.number("top_p", DEFAULT.top_p, 0.0, 1.0)
    min_p = o.number("min_p", DEFAULT.min_p, 0.0, 1.0)
    top_k = o.int("top_k", DEFAULT.top_k, 0)
    seed = o.int("seed", None, -(2 ** 63))
    seed = None if seed is not None and seed < 0 else seed  # (Ollama's -1: a random seed)
    job.sampling = Sampling(temperature, top_k, top_p, min_p, None if seed is None else seed & 0xFFFFFFFF)
    budget = o.int("num_predict", -1, -2)
    if budget == 0:
        raise ApiError("options.num_predict: expected at least 1, or -1 (up to the context's end)", "options")
    if budget < 0:  # (Ollama's default: until the answer ends or the context is full)
        job.max_tokens, job.fill = limits.max_tokens, True
    elif budget > limits.max_tokens:
        raise ApiError(f"options.num_predict is {budget}: at most {limits.max_tokens} (serve --max-tokens)", "options")
    else:
        job.max_tokens = budget
    n_ctx = o.int("num_ctx", None, 1)
    if n_ctx is not None and n_ctx > limits.context:
        raise ApiError(f"options.num_ctx is {n_ctx}: this server's context is {limits.context} tokens per sequence "
                       "(serve --n-ctx)", "options")
    try:
        job.stop = _stop(options.get("stop"))
    except ApiError as e:
        raise ApiError("options." + e.message, "options") from None
    job.stream = _bool(body, "stream", True)
    job.stats = _bool(body, "stats", False)
    job.options["model"] = body.get("model")
    _constraint(body, job)


class _Options:
    """``options``' numbers, checked, their errors naming ``options.KEY``."""

    def __init__(self, options: dict):
        self.options = options

    def number(self, key: str, default, lo, hi):
        return self._named(_number, key, default, lo, hi)

    def int(self, key: str, default, lo):
        return self._named(_int, key, default, lo)

    def _named(self, check, key, *args):
        try:
            return check(self.options, key, *args)
        except ApiError as e:
            raise ApiError("options." + e.message, "options") from None


def _constraint(body: dict, job: Job) -> None:
    fmt = body.get("format")
    if fmt not in (None, "", "json") and not isinstance(fmt, dict):
        raise ApiError("format: expected \"json\" or a JSON Schema (an object)", "format")
    schema = {"type": "object"} if fmt == "json" else fmt if isinstance(fmt, dict) else None
    job.constraint = extension_constraint(body, schema=schema, schema_field="format")
