"""``GET /metrics``: the server's counters in Prometheus' text format (version 0.0.4).

Requests by route and status, their seconds; prompt and generated tokens; the seconds spent
compiling constraints, waiting in the queue, decoding prompts and generating; and, as gauges, the
sequences generating, the requests waiting and the compiles under way. A route that is not the
server's counts as ``other`` (a stranger's made-up paths never become series of their own).
"""

from __future__ import annotations

import threading
from collections import defaultdict

ROUTES = {"/", "/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions", "/api/chat",
          "/api/generate", "/api/tags", "/api/ps", "/api/show", "/api/version"}

_COUNTERS = (
    ("prompt_tokens_total", "Prompt tokens of the answers (cached ones included)."),
    ("generated_tokens_total", "Tokens generated."),
    ("compile_seconds_total", "Seconds requests waited for their constraint to compile (cache hits included)."),
    ("queue_seconds_total", "Seconds requests waited for a sequence."),
    ("prompt_seconds_total", "Seconds decoding prompts."),
    ("generation_seconds_total", "Seconds generating, after the prompt."),
    ("answers_total", "Answers the engine finished (errors included)."),
)


class Metrics:
    """Thread-safe counters; ``render(gauges)`` writes them and the gauges given."""

    def __init__(self):
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = defaultdict(int)
        self._request_seconds: dict[str, float] = defaultdict(float)
        self._request_count: dict[str, int] = defaultdict(int)
        self._counters = {name: 0.0 for name, _ in _COUNTERS}

    def request(self, path: str, status: int, seconds: float) -> None:
        route = path if path in ROUTES else ("/v1/models/{id}" if path.startswith("/v1/models/") else "other")
        with self._lock:
            self._requests[(route, str(status))] += 1
            self._request_seconds[route] += seconds
            self._request_count[route] += 1

    def add(self, **amounts: float) -> None:
        """Add to the counters named (``generated_tokens_total=12, ...``)."""
        with self._lock:
            for name, value in amounts.items():
                self._counters[name] += value

    def render(self, gauges: dict[str, tuple[str, float]]) -> str:
        """The text format; ``gauges``: name -> (help, value)."""
        with self._lock:
            requests = sorted(self._requests.items())
            seconds = sorted(self._request_seconds.items())
            counts = dict(self._request_count)
            counters = dict(self._counters)
        out = ["# HELP localguide_requests_total HTTP requests answered, by route and status.",
               "# TYPE localguide_requests_total counter"]
        out += [f'localguide_requests_total{{route="{r}",status="{s}"}} {n}' for (r, s), n in requests]
        out += ["# HELP localguide_request_seconds Seconds from a request's arrival to the end of its answer.",
                "# TYPE localguide_request_seconds summary"]
        for r, total in seconds:
            out += [f'localguide_request_seconds_sum{{route="{r}"}} {total:.6f}',
                    f'localguide_request_seconds_count{{route="{r}"}} {counts[r]}']
        for name, text in _COUNTERS:
            out += [f"# HELP localguide_{name} {text}", f"# TYPE localguide_{name} counter",
                    f"localguide_{name} {_number(counters[name])}"]
        for name, (text, value) in gauges.items():
            out += [f"# HELP localguide_{name} {text}", f"# TYPE localguide_{name} gauge",
                    f"localguide_{name} {_number(value)}"]
        return "\n".join(out) + "\n"


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6f}"
