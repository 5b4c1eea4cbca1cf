"""The OpenAI request bodies, read and checked: every fault is an ``ApiError`` (HTTP 400 and
OpenAI's error body, the field named in ``param``), never a silent default or fallback.

What OpenAI's API cannot say comes as documented extension fields: ``regex``, ``grammar`` (text
or a shipped name), ``choice``, ``after``, ``max_reasoning_tokens``, ``top_k``, ``min_p``,
``stats`` (the invasiveness figures), ``smc`` (particles: the answer drawn by sequential Monte Carlo).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..constraint import Constraint
from ..sampling import DEFAULT, Sampling


class ApiError(Exception):
    """A request the server refuses: ``status`` and OpenAI's error body."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = message, param, status, type, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Limits:
    """What one request may ask (``localguide serve`` options)."""

    max_tokens: int = 4096          # the most tokens an answer may ask for
    default_max_tokens: int = 512   # an answer's budget where the request names none
    context: int = 4096             # prompt and answer, in tokens, of one sequence
    compile_timeout: float = 30.0   # seconds a constraint's compile may take


@dataclass
class Job:
    """A request, read: the prompt (messages or text), the constraint and the sampling."""

    messages: list | None = None
    prompt: str | None = None
    constraint: Constraint | None = None  # what the answer must be (None: free text)
    options: dict = field(default_factory=dict)     # template_variables
    tools: list | None = None
    tool_choice: object = "auto"
    parallel_tool_calls: bool = True
    after: str | None = None
    max_reasoning_tokens: int | None = None
    max_tokens: int = 512
    fill: bool = False  # max_tokens is an upper bound: the answer may take the context's room up to it
    sampling: Sampling = field(default_factory=Sampling)
    stop: list = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    stats: bool = False
    heal: bool = True
    smc: int | None = None  # particles: the answer drawn by SMC (``localguide.engines.llamacpp.smc``)


_IGNORED = {"model", "user", "metadata", "store", "service_tier", "stream_options", "logit_bias",
            "frequency_penalty", "presence_penalty", "n", "logprobs", "top_logprobs", "echo", "best_of",
            "suffix", "reasoning_effort", "modalities", "prediction", "audio", "web_search_options"}
_CHAT = {"messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "stream",
         "response_format", "tools", "tool_choice", "parallel_tool_calls", "regex", "grammar", "choice", "after",
         "max_reasoning_tokens", "top_k", "min_p", "stats", "chat_template_kwargs", "smc"}
_COMPLETION = {"prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "response_format",
               "regex", "grammar", "choice", "top_k", "min_p", "stats", "heal", "smc"}


def parse_chat(body, limits: Limits, texts: bool = True) -> Job:
    """``POST /v1/chat/completions``'s body (``texts=False``: its strings hold no NUL or lone surrogate)."""
    body = _object(body)
    if texts:
        _texts(body)
    _known(body, _CHAT)
    job = Job(messages=_messages(body.get("messages")))
    _common(body, job, limits, ("max_completion_tokens", "max_tokens"))
    _tools(body, job)
    if job.tools is not None:
        job.tool_choice = _tool_choice(body.get("tool_choice", "auto"))
        job.parallel_tool_calls = _bool(body, "parallel_tool_calls", True)
        if job.tool_choice != "none" and job.constraint is not None:
            raise ApiError("tools cannot be combined with response_format json, regex, grammar or choice: the "
                           "answer is text or calls (tool_choice='none' to constrain the text)", "tools")
    elif body.get("tool_choice") not in (None, "none", "auto"):
        raise ApiError("tool_choice needs tools", "tool_choice")
    if body.get("after") is not None:
        job.after = _text(body, "after")
        if not job.after:
            raise ApiError("after: expected a non-empty trigger text (say '</think>')", "after")
    job.max_reasoning_tokens = _int(body, "max_reasoning_tokens", None, lo=0)
    if job.max_reasoning_tokens is not None and job.after is None:
        raise ApiError("max_reasoning_tokens needs after (the text that ends the reasoning)", "max_reasoning_tokens")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ApiError("chat_template_kwargs: expected an object", "chat_template_kwargs")
    job.options["template_variables"] = kwargs
    smc_field(body, job, limits)
    return job


def parse_completion(body, limits: Limits, texts: bool = True) -> Job:
    """``POST /v1/completions``'s body (``texts=False``: its strings hold no NUL or lone surrogate)."""
    body = _object(body)
    if texts:
        _texts(body)
    _known(body, _COMPLETION)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError("prompt: expected a string (one prompt per request)", "prompt")
    if not prompt:
        raise ApiError("prompt: expected a non-empty string", "prompt")
    job = Job(prompt=prompt)
    _common(body, job, limits, ("max_tokens",))
    job.heal = _bool(body, "heal", True)
    smc_field(body, job, limits)
    return job


MAX_PARTICLES = 64  # of one request's SMC (each a sequence of a context of the request's own)
SMC_CONTEXTS = 4  # an SMC draw's cells (particles x (max_tokens + 1)): at most this many contexts' worth


def smc_field(body: dict, job: Job, limits: Limits) -> None:
    """The ``smc`` extension (particles, 2 to ``MAX_PARTICLES``), checked against the rest of the job."""
    n = _int(body, "smc", None, lo=2)
    if n is None:
        return
    if n > MAX_PARTICLES:
        raise ApiError(f"smc: at most {MAX_PARTICLES} particles, got {n}", "smc")
    if job.constraint is None and (job.tools is None or job.tool_choice == "none"):
        raise ApiError("smc samples valid texts: it needs a constraint (a JSON Schema, regex, grammar, choice or "
                       "tools)", "smc")
    if job.stop:
        raise ApiError("stop strings cut the text where they match: they do not apply with smc", "stop")
    if job.sampling.temperature <= 0:
        raise ApiError("smc samples at a temperature above 0 (greedy has one text)",
                       "temperature" if "temperature" in body else "options")
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    for key, off in (("top_k", 0), ("top_p", 1), ("min_p", 0)):  # (the target: the model's distribution, untruncated)
        for where, given in ((key, body.get(key)), ("options", options.get(key))):
            if given is not None and given != off:
                raise ApiError(f"smc samples the model's distribution without truncation: {key} must be left out "
                               f"or {off}, got {given!r}", where)
    if body.get("heal") is True:
        raise ApiError("smc draws the text after the prompt as written: heal does not apply", "heal")
    if job.fill:  # (Ollama's default budget, the context's room: an answer's default here)
        job.max_tokens, job.fill = min(job.max_tokens, limits.default_max_tokens), False
    if n * (job.max_tokens + 1) > SMC_CONTEXTS * limits.context:
        raise ApiError(f"smc: {n} particles of up to {job.max_tokens} tokens need {n * (job.max_tokens + 1)} cells, "
                       f"over {SMC_CONTEXTS} contexts of {limits.context} (fewer particles or a smaller max_tokens)",
                       "smc")
    job.heal = False  # (SMC draws the text after the prompt as written)
    job.smc = n


# -- the parts ------------------------------------------------------------------------------

def _object(body) -> dict:
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    return body


MAX_STOP_CHARS = 1000  # one stop string (the text is matched against it at every token)
MAX_TOOLS = 128  # tools in one request (as OpenAI's bound)
MAX_TOOL_CHARS = 32_768  # one tool, as JSON (its description is rendered into the prompt, its schema compiled)
MAX_MESSAGES = 1024  # messages in one request (the template renders each)
MAX_MESSAGES_CHARS = 1_000_000  # characters of text in all the messages (beyond any context)
MAX_DEPTH = 64  # arrays and objects nested in a request body (a schema's nesting included)


def check_depth(body) -> None:
    """Refuse a body nested deeper than ``MAX_DEPTH``, naming where (iterative: any depth)."""
    if at := _deep_path(body):
        raise ApiError(f"{at}: nested more than {MAX_DEPTH} arrays and objects deep (serve's bound)",
                       at.split(".")[0].split("[")[0] or None)


def _deep_path(body) -> str:
    """Where the first array or object ``MAX_DEPTH`` deep in ``body`` is, as ``a.b[2].c`` ("" if none)."""
    stack = [(body, "", 0)]
    while stack:
        v, at, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return at.lstrip(".")
        items = v.items() if isinstance(v, dict) else enumerate(v)
        stack.extend((x, f"{at}.{k}" if isinstance(v, dict) else f"{at}[{k}]", depth + 1)
                     for k, x in items if isinstance(x, (dict, list)))
    return ""


# (text that becomes prompt tokens or is matched against the answer: no NUL either)
_PROMPT_TEXT = ("messages", "prompt", "tools", "after", "stop")


def _texts(body: dict, prompt_fields: tuple = _PROMPT_TEXT) -> None:
    """Every string of the body (keys too) valid Unicode; the prompt's text without NUL."""
    from ..chat.plain import TextError, check_text

    try:
        for key, value in body.items():
            check_text(key, "a field name")
            check_text(value, key, nul=key in prompt_fields)
    except TextError as e:
        raise ApiError(str(e), e.field if e.field in body else None) from None


def _known(body: dict, known: set) -> None:
    for key in body:
        if key not in known and key not in _IGNORED:
            raise ApiError(f"unknown field {key!r} (localguide's extensions: regex, grammar, choice, after, "
                           "max_reasoning_tokens, top_k, min_p, stats, smc)", key)
    if body.get("n") not in (None, 1):
        raise ApiError("n: only one choice per request is supported", "n")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise ApiError(f"{key} is not supported (leave it out or 0)", key)
    for key, unset in (("logprobs", (None, False, 0)), ("top_logprobs", (None, 0)), ("echo", (None, False)),
                       ("suffix", (None, "")), ("best_of", (None, 1))):
        if body.get(key) not in unset or isinstance(body.get(key), bool) and key in ("top_logprobs", "best_of"):
            raise ApiError(f"{key} is not supported", key)
    if body.get("logit_bias"):
        raise ApiError("logit_bias is not supported", "logit_bias")


def _common(body: dict, job: Job, limits: Limits, budget_keys: tuple) -> None:
    given = [k for k in budget_keys if body.get(k) is not None]
    job.max_tokens = limits.default_max_tokens
    if given:
        job.max_tokens = _int(body, given[0], None, lo=1)
        if job.max_tokens > limits.max_tokens:
            raise ApiError(f"{given[0]} is {job.max_tokens}: at most {limits.max_tokens} (serve --max-tokens)",
                           given[0])
    temperature = _number(body, "temperature", DEFAULT.temperature, lo=0.0, hi=2.0)
    top_p = _number(body, "top_p", DEFAULT.top_p, lo=0.0, hi=1.0)
    min_p = _number(body, "min_p", DEFAULT.min_p, lo=0.0, hi=1.0)
    top_k = _int(body, "top_k", DEFAULT.top_k, lo=0)
    seed = _int(body, "seed", None, lo=-(2 ** 63))
    job.sampling = Sampling(temperature, top_k, top_p, min_p, None if seed is None else seed & 0xFFFFFFFF)
    job.stop = _stop(body.get("stop"))
    job.stream = _bool(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise ApiError("stream_options: expected an object", "stream_options")
        job.include_usage = bool(so.get("include_usage", False))
    job.stats = _bool(body, "stats", False)
    _constraint(body, job)


def _constraint(body: dict, job: Job) -> None:
    c = {"json_schema": None}
    strict = False
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
            raise ApiError("response_format: expected {'type': 'text'}, {'type': 'json_object'} or "
                           "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}", "response_format")
        if rf["type"] == "json_object":
            schema = rf.get("schema")  # (llama.cpp's and llama-cpp-python's form)
            c["json_schema"] = schema if schema is not None else {"type": "object"}
        elif rf["type"] == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or "schema" not in js and "name" not in js:
                raise ApiError("response_format.json_schema: expected {'name': ..., 'schema': {...}, 'strict': ...}",
                               "response_format.json_schema")
            schema = js.get("schema", {})
            if not isinstance(schema, (dict, bool)):
                raise ApiError("response_format.json_schema.schema: expected a JSON Schema (an object)",
                               "response_format.json_schema.schema")
            c["json_schema"] = schema
            strict = bool(js.get("strict", False))
    job.constraint = extension_constraint(body, schema=c["json_schema"], schema_field="response_format",
                                          strict=strict)


def extension_constraint(body: dict, *, schema, schema_field: str, strict: bool = False) -> Constraint | None:
    """The request's one constraint: ``schema`` (read from ``schema_field`` by the caller) or
    localguide's ``regex``, ``grammar`` or ``choice`` fields; two of them are a 400."""
    c = {"json_schema": schema, "regex": None, "choice": None, "grammar": None}
    for key in ("regex", "grammar"):
        if body.get(key) is not None:
            c[key] = _text(body, key)
    if body.get("choice") is not None:
        choice = body["choice"]
        if not isinstance(choice, list) or not choice or not all(isinstance(x, str) for x in choice):
            raise ApiError("choice: expected a non-empty array of strings", "choice")
        c["choice"] = choice
    named = [schema_field if k == "json_schema" else k for k, v in c.items() if v is not None]
    if len(named) > 1:
        raise ApiError(f"give one constraint, not {' and '.join(named)}", named[1])
    return Constraint.of(**c, **({"strict": strict} if schema is not None else {}))


def _messages(messages) -> list:
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages: expected a non-empty array of {'role': ..., 'content': ...}", "messages")
    if len(messages) > MAX_MESSAGES:
        raise ApiError(f"messages: {len(messages):,} messages, at most {MAX_MESSAGES:,} (serve's bound)", "messages")
    if (n := _characters(messages)) > MAX_MESSAGES_CHARS:
        raise ApiError(f"messages: {n:,} characters of text, at most {MAX_MESSAGES_CHARS:,} (serve's bound)",
                       "messages")
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if calls is not None and not (isinstance(calls, list) and all(
                isinstance(c, dict) and isinstance(c.get("function"), dict)
                and isinstance(c["function"].get("name"), str)
                and isinstance(c["function"].get("arguments", {}), (dict, str)) for c in calls)):
            raise ApiError(f"messages[{i}].tool_calls: expected [{{'function': {{'name': ..., 'arguments': ...}}}}, "
                           "...]", "messages")
    return messages


def _characters(value) -> int:
    """The characters of the strings in ``value`` (not its keys); iterative."""
    n, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            n += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def _tools(body: dict, job: Job) -> None:
    """``body["tools"]`` (OpenAI's form, which Ollama's shares) into ``job.tools``, bounded."""
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list) or not tools:
        raise ApiError("tools: expected a non-empty array of {'type': 'function', 'function': {...}}", "tools")
    if len(tools) > MAX_TOOLS:
        raise ApiError(f"tools: {len(tools)} tools, at most {MAX_TOOLS}", "tools")
    for i, tool in enumerate(tools):
        if (n := len(json.dumps(tool, ensure_ascii=False))) > MAX_TOOL_CHARS:
            raise ApiError(f"tools[{i}]: {n:,} characters as JSON, at most {MAX_TOOL_CHARS:,} (serve's bound "
                           "on one tool)", "tools")
    job.tools = tools


def _tool_choice(value):
    if value in ("auto", "required", "none"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
        return value
    raise ApiError("tool_choice: expected 'auto', 'required', 'none' or "
                   "{'type': 'function', 'function': {'name': ...}}", "tool_choice")


def _stop(stop) -> list:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise ApiError("stop: expected a non-empty string or an array of up to 4", "stop")
    long = next((i for i, s in enumerate(stop) if len(s) > MAX_STOP_CHARS), None)
    if long is not None:
        raise ApiError(f"stop[{long}]: {len(stop[long])} characters, at most {MAX_STOP_CHARS} (each answer's text "
                       "is matched against every stop string)", "stop")
    return stop


def _text(body: dict, key: str) -> str:
    v = body[key]
    if not isinstance(v, str):
        raise ApiError(f"{key}: expected a string", key)
    return v


def _bool(body: dict, key: str, default: bool) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ApiError(f"{key}: expected true or false", key)
    return v


def _int(body: dict, key: str, default, lo: int | None = None):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ApiError(f"{key}: expected an integer", key)
    if lo is not None and v < lo:
        raise ApiError(f"{key}: expected at least {lo}, got {v}", key)
    if v > 2 ** 63:
        raise ApiError(f"{key}: too large", key)
    return v


def _number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ApiError(f"{key}: expected a number", key)
    if not lo <= v <= hi:
        raise ApiError(f"{key}: expected a number from {lo:g} to {hi:g}, got {v}", key)
    return float(v)
