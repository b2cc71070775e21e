"""The Streamlit face of the workbench (the only package that imports streamlit).

`app.py` calls `workbench.ui.main.main()`: a router over seven pages in `pages/`, each a thin
file calling its view in `views/`; state lives in `state`, cached core calls in `loaders`.
"""
