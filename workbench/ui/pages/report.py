"""Page file for st.navigation (AppTest.switch_page reaches it by path)."""
from workbench.ui.views import report

report.render()
