"""The specd dashboard (Streamlit). Never imports torch."""
