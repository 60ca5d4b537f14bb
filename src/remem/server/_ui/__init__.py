"""The web inspector of ``remem serve``, at ``/ui``: threads, cards, timelines, memories, usage, jobs.

Server-rendered pages (``_threads``, ``_memories``, ``_ops``) over the service's own parts, in the tenant
of the key the browser signed in with (``_session``: the key in an HttpOnly, Secure, SameSite=Strict
cookie; CSRF tokens on every change; a strict Content-Security-Policy). Stored text is always escaped
(``_html``). Works offline: the stylesheet and the small script are served from here.
"""

from remem.server._ui._signin import PREFIX, PUBLIC, is_ui, register, session_key, signed_out

__all__ = ["PREFIX", "PUBLIC", "is_ui", "register", "session_key", "signed_out"]
