"""While ``remem serve`` runs, the garbage collector's full collections walk only what its requests made:
the objects alive once the server has started (its modules, the app, the pools) are frozen (``gc.freeze``)
and given back to the collector at shutdown. Counted (the objects a full collection walks), never timed."""

from __future__ import annotations

import gc
from pathlib import Path

from remem.testing import offline_settings

SETTINGS = offline_settings()


def test_a_full_collection_walks_only_what_was_made_after_start_up(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from remem.server import ServerOptions, create_app

    app = create_app(ServerOptions(f"sqlite:///{tmp_path / 'heap.db'}", rate_limit=0), settings=SETTINGS)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        frozen = gc.get_freeze_count()
        message = {"role": "user", "content": "the garden needs water"}
        answer = client.post("/v1/threads/t1/messages", json={"messages": [message]})
        assert answer.status_code == 200
        card = client.post("/v1/threads/t1/card", json={"query": "garden"})
        assert card.status_code == 200
        walked = len(gc.get_objects())  # what a full collection walks now
        # the start-up heap (this test process's, the app's, the store's) is out of it
        assert frozen > 10 * walked, (frozen, walked)
    assert gc.get_freeze_count() == 0  # given back at shutdown: collectable again
