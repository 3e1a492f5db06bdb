"""The notebook widgets: the only modules that import ipywidgets or plotly."""
