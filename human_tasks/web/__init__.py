"""The web task: Jinja2 templates and the browser-side JavaScript/CSS that run the timed trials.

The experiment server hosts these files; they hold no experiment logic the server relies on
(the server re-checks everything the browser sends).
"""

from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = WEB_DIR / "templates"
STATIC_DIR = WEB_DIR / "static"
