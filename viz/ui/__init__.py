"""The Gradio page: layout, handlers, the strings table, presets, firing and presenter access."""
