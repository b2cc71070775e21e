"""Docs versus code: vLLM's documented hardware table beside what the pinned rules select."""
from __future__ import annotations

import json

import streamlit as st

from workbench.ui import loaders, state, widgets


def _cell_trace(row: str, preset: str, env: dict):
    from workbench.dispatch import trace_scheme
    from workbench.dispatch.docs_matrix import MODELLED_ROWS

    return trace_scheme(MODELLED_ROWS[row][0], preset, env or None, state.rule_set())


def disagreements(rows: list[dict]) -> list[tuple[str, dict]]:
    return [(r["implementation"], c) for r in rows for c in r["cells"] if c["disagrees"]]


def table(rows: list[dict]) -> list[dict]:
    """One row per implementation: each hardware cell as 'docs / code', and where vLLM fails."""
    from workbench.dispatch.docs_matrix import FAILS_AT_WORDS

    out = []
    for r in rows:
        line = {"implementation": r["implementation"]}
        for c in r["cells"]:
            docs = "YES" if c["docs"] else "NO"
            if c["code"] is None:
                line[c["hardware"]] = docs
            else:
                code = ("YES" if c["code"] else "NO") + (" (W4A16)" if c["weight_only"] else "")
                fails = f", {FAILS_AT_WORDS[c['fails_at']]}" if c["fails_at"] else ""
                line[c["hardware"]] = f"{docs} / {code}{fails}" + (" ≠" if c["disagrees"] else "")
        out.append(line)
    return out


def render(*, focus: tuple[str, str] | None = None) -> None:
    """The matrix, then each disagreement with its trace; `focus` opens one (row, hardware)."""
    from workbench import plots

    if focus is None:
        st.title("Docs versus code")
    try:
        env = widgets.current_env()
        rules = state.rule_set()
        rows = loaders.docs_matrix(json.dumps(env, sort_keys=True), rules.version)
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
        return
    st.markdown("Left of each cell: vLLM's *Supported Hardware* table "
                f"(`docs/features/quantization/README.md`); right: what the vLLM {rules.version} "
                "rules select for a representative layer on a preset of that hardware, under the "
                "env knobs set on the "
                "trace page. Rows the workbench does not model show the docs only.")
    st.plotly_chart(plots.docs_matrix_figure(rows, rules), key=f"docs-matrix-{bool(focus)}")
    with st.expander("The same as a table", expanded=False):
        st.dataframe(table(rows), hide_index=True, width="stretch")
    from workbench.dispatch.docs_matrix import FAILS_AT_WORDS

    found = disagreements(rows)
    st.subheader(f"{len(found)} disagreement(s), each explained by its trace")
    for row, cell in found:
        opened = focus == (row, cell["hardware"])
        with st.expander(f"{row} on {cell['hardware']} ({cell['preset']}): docs "
                         f"{'YES' if cell['docs'] else 'NO'}, code {'YES' if cell['code'] else 'NO'}"
                         + (f" ({FAILS_AT_WORDS[cell['fails_at']]})" if cell["fails_at"] else ""),
                         expanded=opened):
            st.markdown(cell["explanation"])
            t = _cell_trace(row, cell["preset"], env)
            widgets.outcome_view(t)
            widgets.steps_view(t, key=f"docs-{row}-{cell['hardware']}")
    from workbench.dispatch.docs_matrix import MODELLED_ROWS

    st.caption("Representative layers: " + "; ".join(f"**{k}**: {v[1]}" for k, v in MODELLED_ROWS.items()))
