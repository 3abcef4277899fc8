"""Whether a cookie this response sets is marked ``Secure``, decided per request.

A ``Secure`` cookie travels only over HTTPS, except that browsers treat loopback as secure
and send it over ``http://127.0.0.1`` too; Python's clients (``http.cookiejar``, used by
``requests``) do not, so a study piloted by a script on the researcher's own machine would
lose its cookies at the first step. The rule: ``Secure`` whenever the request came over
HTTPS (``request.is_secure``, which a trusted proxy's ``X-Forwarded-Proto`` sets through
``ProxyFix``) or names a host that is not loopback; plain only for plain HTTP to loopback,
where nothing leaves the machine. ``--insecure-cookies`` (``INSECURE_COOKIES``) drops the
mark everywhere, for a closed lab network without HTTPS.
"""

from __future__ import annotations

import ipaddress

from flask import current_app, request

INSECURE_COOKIES = "CUEBENCH_INSECURE_COOKIES"
"""App config key: True when ``serve --insecure-cookies`` was given."""
LOOPBACK_NAMES = ("localhost",)


def is_loopback_host(host: str) -> bool:
    """``127.0.0.1:8080``, ``[::1]:8080``, ``localhost``, ``app.localhost``: a host that never leaves the machine."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    name = name.rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def secure_cookie() -> bool:
    """The ``Secure`` mark for a cookie set in answer to the current request (module docstring's rule)."""
    if current_app.config.get(INSECURE_COOKIES):
        return False
    return request.is_secure or not is_loopback_host(request.host)
