"""Mixture-of-experts building blocks: router → dispatcher → experts → combine."""

from biomoe.model.moe.dispatch import LocalDispatcher, TokenDispatcher
from biomoe.model.moe.experts import Experts, known_backends, register_expert_backend
from biomoe.model.moe.layer import MoELayer
from biomoe.model.moe.router import RoutingResult, TopKRouter

__all__ = ["Experts", "LocalDispatcher", "MoELayer", "RoutingResult", "TokenDispatcher",
           "TopKRouter", "known_backends", "register_expert_backend"]
