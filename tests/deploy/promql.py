"""Just enough PromQL lexing to list the metric names an expression selects.

Syntax is checked by promtool itself (the tests feed every expression through ``promtool check
rules``); this only has to find the selectors in expressions promtool accepted: identifiers that are
not function calls, keywords, label names inside ``{...}`` / ``by (...)``, or durations.
"""

from __future__ import annotations

import re

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
     "inf", "nan"}
)
# Grafana's template variables, replaced by values promtool accepts.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m", "$instance": ".*",
                "$serve_instance": ".*"}


def expand_grafana_vars(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return expr


def metric_names(expr: str) -> set[str]:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        rest = s[m.end() :].lstrip()
        if rest.startswith("(") or m.group(0).lower() in _KEYWORDS:
            continue
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # the exponent/suffix of a number literal
        names.add(m.group(0))
    return names
