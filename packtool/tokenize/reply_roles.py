"""Chat rows with no trained turn: which roles their turns had. Only a turn whose role is
`assistant` (and whose weight is not 0) is trained, and packtool maps no other role to it, so a
data set that names its replies `narrator`, `critic` or `developer` gives rows with no loss
token. Such a row is refused (`--on-empty error`) or skipped and counted (`--on-empty skip`);
either way the user is told the roles the rows had, the role that trains and the fix, not only
"no loss tokens" (issue 23 class 5: a skip that drops real replies must not read as a count).

The render (`shapes.render_batch`) records the roles of a rendered chat row that has no
trained span; the pipeline names them in the refusal, or counts them per file (the note, kept
in cache.json and said again on reuse) and per run (the skip warning of the pack summary).
"""
from __future__ import annotations

from packtool.errors import arg
from packtool.integers import short
from packtool.notes import note
from packtool.tokenize.messages import ROLES

TRAINED = "assistant"
_KNOWN = set(ROLES)


def roles_of(msgs: list) -> tuple[str, ...]:
    """The distinct roles of a row's turns, in the order met."""
    return tuple(dict.fromkeys(str(m.get("role")) for m in msgs if isinstance(m, dict)))


def _quoted(roles) -> str:
    return ", ".join(short(r) for r in roles)


def fix(roles) -> str:
    """What trains and what to do, for rows whose turns had `roles`."""
    said = [f"only a turn whose role is {TRAINED!r} and whose weight is not 0 is trained, and of it what the "
            f"chat template trains (a turn of tool calls alone is context under the built-ins, which train "
            f"a turn's text: a template trains calls inside {{% generation %}})"]
    if TRAINED in roles:  # an assistant turn that is not trained: weight 0, or nothing the template trains
        said.append("give a reply turn its text and a weight of 1 (or none), or use a template whose "
                    "{% generation %} blocks hold its tool calls")
    if set(roles) - _KNOWN or TRAINED not in roles:
        said.append(f"packtool maps no other role to {TRAINED!r} (no flag does): rename the role that "
                    f"holds the replies to {TRAINED!r} in the data")
    return f"{said[0]}: {' or '.join(said[1:])}"


def why(column: str, roles) -> str:
    """The refusal's words for one row whose turns had `roles`."""
    return (f"{column} gives no assistant tokens to train on: its turns' roles are {_quoted(roles)}; "
            f"{fix(roles)}")


def record(acc: dict, roles, row: int) -> None:
    """Count one skipped row with `roles` in `acc` (JSON-ready, kept in cache.json):
    {"rows": n, "first": first row, "first_roles": its roles, "roles": {role: [rows, first row]}}."""
    acc["rows"] = acc.get("rows", 0) + 1
    if row < acc.get("first", row + 1):
        acc["first"], acc["first_roles"] = row, list(roles)
    for r in roles:
        seen = acc.setdefault("roles", {}).setdefault(r, [0, row])
        seen[0] += 1
        seen[1] = min(seen[1], row)


def merge_records(acc: dict, more: dict) -> None:
    """Add `more` (a `record` of other rows of the same file: a Ray block's) to `acc`."""
    if not more:
        return
    acc["rows"] = acc.get("rows", 0) + more["rows"]
    if more["first"] < acc.get("first", more["first"] + 1):
        acc["first"], acc["first_roles"] = more["first"], more["first_roles"]
    for r, (n, first) in more.get("roles", {}).items():
        seen = acc.setdefault("roles", {}).setdefault(r, [0, first])
        seen[0] += n
        seen[1] = min(seen[1], first)


def run_roles(accs) -> dict:
    """Per role, the skipped rows of every file that had it (the cache's skipped.roles)."""
    out: dict = {}
    for acc in accs:
        for r, (n, _) in (acc or {}).get("roles", {}).items():
            out[r] = out.get(r, 0) + n
    return out


def say_untrained(path: str, acc: dict | None) -> None:
    """One note per file, said on every run (a reused cache says its stored counts again)."""
    if not acc:
        return
    n, roles = acc["rows"], acc.get("roles", {})
    said = "; ".join(f"{r!r} ({k:,} row{'s' if k != 1 else ''}, first row {first})"
                     for r, (k, first) in sorted(roles.items()))
    note(f"{path}: {n:,} chat row{'s' if n != 1 else ''} skipped by {arg('on_empty', 'skip')} had no trained turn "
         f"(first row {acc['first']}); their turns' roles: {said}; {fix(roles)} (rows count from 0)")


def skipped_words(roles: dict | None) -> str:
    """The skip warning's words on the roles of the rows with no loss tokens ('' if unknown)."""
    if not roles:
        return ""
    said = ", ".join(f"{r!r} ({n:,})" for r, n in sorted(roles.items()))
    return f": the chat rows among them had turns of roles {said}; {fix(roles)}"
