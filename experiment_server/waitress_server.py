"""waitress, the single-process server, with the bounds of ``request_bounds``.

waitress reads each request whole in its event loop before a thread takes it, but its one
timeout (``channel_timeout``) starts again at every byte a client sends: a request head sent
one byte every few seconds stays open for ever, and 1,050 such connections filled its
connection limit, so no new participant got a page. Here its own classes are extended: the
parser refuses a request from its head (``request_bounds.refusal``: 411, 417, 413) before any
body is read, and before waitress sends a "100 Continue"; each channel remembers when its
request began and the server's periodic maintenance closes one that has not arrived whole within
``REQUEST_DEADLINE_S``; and the server counts open connections per address and closes one beyond
``CONNECTIONS_PER_ADDRESS`` as soon as it is accepted.
"""

from __future__ import annotations

import time

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher
from waitress.utilities import Error

from .answers_first import AnswerBudget, serve_answers_first
from .request_bounds import CONNECTIONS_PER_ADDRESS, REQUEST_DEADLINE_S, ConnectionsPerAddress, refusal


class _Refused(Error):
    def __init__(self, status: int, reason: str):
        super().__init__("request bodies here are sent whole with a Content-Length, within the route's limit")
        self.code, self.reason = status, reason


class BoundedParser(HTTPRequestParser):
    """waitress's request parser, which refuses a request by its head as soon as the head is complete."""

    def received(self, data: bytes) -> int:
        head_done = self.headers_finished
        consumed = super().received(data)
        if self.headers_finished and not head_done and self.error is None and not self.empty:
            headers = {"content-length": str(self.content_length)}
            if self.chunked:
                headers["transfer-encoding"] = "chunked"
            if self.expect_continue:
                headers["expect"] = "100-continue"
            refused = refusal(self.path, headers)
            if refused:
                self.error, self.completed, self.expect_continue = _Refused(*refused), True, False
        return consumed


class BoundedChannel(HTTPChannel):
    """A connection that remembers when the request it is receiving began (None between requests)."""

    parser_class = BoundedParser
    request_began: float | None = None
    counted = False

    def received(self, data: bytes) -> bool:
        partial, now = self.request, time.monotonic()
        result = super().received(data)
        if self.request is None:
            self.request_began = None
        elif self.request is not partial:
            self.request_began = now
        return result

    def del_channel(self, map=None) -> None:
        if self.counted:
            self.counted = False
            self.server.per_address.closed(self.addr[0])
        super().del_channel(map)


class BoundedServer(TcpWSGIServer):
    """waitress's TCP server with a deadline for each request and a limit of connections per address."""

    channel_class = BoundedChannel

    def __init__(self, *args, connections_per_address: int, **kwargs):
        self.per_address = ConnectionsPerAddress(connections_per_address)
        super().__init__(*args, **kwargs)

    def handle_accept(self) -> None:
        try:
            accepted = self.accept()
            if accepted is None:
                return
            conn, addr = accepted
            self.set_socket_options(conn)
        except OSError:
            return
        addr = self.fix_addr(addr)
        if not self.per_address.admit(addr[0]):
            conn.close()
            return
        channel = self.channel_class(self, conn, addr, self.adj, map=self._map)
        channel.counted = True

    def maintenance(self, now: float) -> None:
        """waitress's idle timeout, and the request deadline."""
        super().maintenance(now)
        late = time.monotonic() - REQUEST_DEADLINE_S
        for channel in self.active_channels.values():
            began = getattr(channel, "request_began", None)
            if began is not None and began < late:
                channel.will_close = True


def run_waitress(app, budget: AnswerBudget, trusted_proxies: int, **settings) -> None:
    """Serve ``app`` (blocking) with waitress's ``settings`` (``Adjustments``), answers first (``budget``: the
    app's ``answers_first.AnswerBudget``); connections per address unlimited behind trusted proxies."""
    adj = Adjustments(cleanup_interval=1, **settings)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    shared: dict = {}
    servers = [BoundedServer(app, shared, dispatcher=dispatcher, adj=adj, sockinfo=info,
                             connections_per_address=0 if trusted_proxies else CONNECTIONS_PER_ADDRESS)
               for info in adj.listen]
    serve_answers_first(servers[0], budget)
    for server in servers:
        server.print_listen("Serving on http://{}:{}")
    servers[0].run()
