"""The model-boundary proxy: per-rollout routes to the engine that record exact tokens of every call."""

from appliance.proxy.app import ServingEngine
from appliance.proxy.routes import hash_token, register_route
from appliance.proxy.server import ProxyServer, create_app

__all__ = ["ServingEngine", "ProxyServer", "create_app", "hash_token", "register_route"]
