"""The dashboard's pages: each a function drawing one page with Streamlit from data the
``specd.dashboard.data`` functions return."""
