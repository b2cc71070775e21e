"""The app's state module: its env knobs are the rule set's, and it imports no page view."""
from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from workbench.dispatch import parse_env
from workbench.dispatch.versions import pinned
from workbench.ui import state

STATE = Path(state.__file__)


def test_the_env_knobs_and_their_unset_values_are_the_rule_sets():
    env = pinned().ENV  # the sidebar's version is the pinned one until the user picks another
    assert state.env_defaults() == dict(env.unset_values)
    assert tuple(state.env_defaults()) == env.known_keys
    # each unset value, handed to the env parser, is what vLLM reads when the key is absent
    set_ones = {k: v for k, v in env.unset_values.items() if v != ""}
    assert replace(parse_env(set_ones), raw=()) == parse_env({})


def test_state_imports_no_page_view():
    """The views import state; state importing a view (even lazily) made an import circle."""
    imported = []
    for node in ast.walk(ast.parse(STATE.read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
            imported += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    assert not [m for m in imported if m.startswith("workbench.ui.views")], imported
