"""The numbers and names the web pages share with Python come from Python: the checked-in
``static/task/constants.js`` is what ``python -m human_tasks.web.constants`` writes today, and the pages' modules
import each of them."""

from __future__ import annotations

import json
import re

from human_tasks.web import STATIC_DIR
from human_tasks.web.constants import MODULE, SHARED, javascript


def test_the_checked_in_module_is_current():
    assert MODULE.read_text(encoding="utf-8") == javascript(), \
        "human_tasks/web/static/task/constants.js is out of date: run `python -m human_tasks.web.constants`"


def test_the_module_exports_the_documented_values():
    """Each ``export const NAME = VALUE;``: a frame dropped beyond 1.2 periods, 1 s of practice feedback (as in
    the lab), a browser check failing beyond a fifth of irregular frames, viewing distances of 20-300 cm (docs/web.md,
    docs/lab.md)."""
    exported = dict(re.findall(r"^export const (\w+) = (.+);$", javascript(), flags=re.M))
    families = exported.pop("BROWSER_FAMILIES")
    assert exported == {"DROPPED_FRAME_FACTOR": "1.2", "FEEDBACK_MS": "1000", "MAX_OUTLIER_SHARE": "0.2",
                        "VIEWING_DISTANCE_CM": "[20.0, 300.0]", "DEFAULT_MIN_WINDOW": "[800, 600]",
                        "DEFAULT_REFRESH_HZ": "[48.0, 500.0]",
                        "BROWSER_NAMES": '{"chrome": "Chrome", "edge": "Edge", "firefox": "Firefox", '
                                         '"safari": "Safari", "opera": "Opera"}'}
    # the families in the order a user agent is matched against them: Edge and Opera also say "Chrome"
    assert [family for family, _ in json.loads(families)] == ["edge", "opera", "firefox", "chrome", "safari"]


def test_every_shared_number_is_imported_by_the_pages_and_defined_nowhere_else_in_them():
    """The task's modules and the consent page's device check (``static/device.js``)."""
    modules = {str(path.relative_to(STATIC_DIR)): path.read_text(encoding="utf-8")
               for path in STATIC_DIR.rglob("*.js") if path != MODULE}
    imported = {name for text in modules.values()
                for names in re.findall(r'import \{([^}]*)\} from "\./(?:task/)?constants\.js"', text)
                for name in re.split(r"\s*,\s*", names.strip())}
    assert imported == set(SHARED)
    declared = {(file, name) for file, text in modules.items() for name in SHARED
                if re.search(rf"\b(const|let|var)\s+{name}\b", text)}
    assert declared == set()

