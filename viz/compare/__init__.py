"""Two policies side by side: one arrival pattern through two engine configurations
(pattern.py), run one after the other (runner.py), started from the page (controls.py) and
read by the browser (routes.py)."""
