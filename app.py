"""Streamlit entry point: `streamlit run app.py` (the router lives in workbench/ui/main.py)."""
from workbench.ui.main import main

main()
