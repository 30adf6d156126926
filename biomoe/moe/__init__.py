"""Mixture-of-experts building blocks: router → dispatcher → experts → combine."""

from biomoe.moe.dispatch import LocalDispatcher, TokenDispatcher
from biomoe.moe.experts import Experts, known_backends, register_expert_backend
from biomoe.moe.layer import MoELayer
from biomoe.moe.router import RoutingResult, TopKRouter

__all__ = ["Experts", "LocalDispatcher", "MoELayer", "RoutingResult", "TokenDispatcher",
           "TopKRouter", "known_backends", "register_expert_backend"]
