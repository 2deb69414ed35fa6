"""Per-rollout routes: an unguessable token in the URL is the rollout's identity at the model boundary.

The store keeps only a SHA-256 of the token, so a copy of the store file hands out no live routes.
"""

from __future__ import annotations

import hashlib
import secrets

from appliance.store import Store


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def register_route(store: Store, rollout_id: str) -> str:
    """A fresh secret token routing to `rollout_id`; harnesses use `{proxy}/r/{token}/v1` as base URL."""
    token = secrets.token_urlsafe(32)
    store.set_rollout_route(rollout_id, hash_token(token))
    return token
