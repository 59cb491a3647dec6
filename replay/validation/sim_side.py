"""What every simulated run of one ``validate`` shares: :class:`SimSide`.

The simulated side of a fleet validation (:mod:`replay.validation.fleet_sim`) replays
each live run's programs on as many simulated replicas, each sized like the live ones and
priced by one profile, under the live load, with the continuum bundle and the routers'
settings where they are not their defaults. Those are the same for every run, every
router and every perturbed timing of one validation, so they are built once, here; what
varies per simulation (the policy, the router, the live fleet's URLs, a placement) stays
an argument of the functions that simulate. A single-server validation's is one replica
without routers (:mod:`replay.validation.server_doc`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from profiles.cost import ProfileCostModel
from profiles.schema import Profile
from replay.client_tags import FULL
from replay.fleet.routers import RouterSettings
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from ttlctl import bundle_doc


@dataclass(frozen=True, slots=True)
class SimSide:
    """The simulated fleet beside the live ones: ``replicas`` engines sized by ``engine``
    and priced by ``profile``, the arrivals of ``timing`` (the live runs' load), the
    ``bundle`` continuum runs with, and ``settings``: a router's settings where they are
    not its defaults (keyed by the live router's name: Program scheduling's config and
    calibration); with ``async_scheduling``, every replica schedules a step ahead, as
    vLLM's async scheduling does."""

    replicas: int
    profile: Profile
    engine: SimSchedulerConfig
    timing: Load
    bundle: bundle_doc.Bundle | None = None
    settings: Mapping[str, RouterSettings] = field(default_factory=dict)
    #: every replica with vLLM's async scheduling (as the live servers were told)
    async_scheduling: bool = False
    #: what the clients tag each call with, as the live client did (``--client-tags``)
    client_tags: str = FULL

    def cost(self) -> ProfileCostModel:
        """The profile as the simulator's cost model."""
        return ProfileCostModel(self.profile)

    def config(self) -> ReplayConfig:
        """The replay's settings: each engine sized as the live replicas; a prompt too
        long for the model's length or the KV cache clipped to fit, not refused."""
        return ReplayConfig(
            engine=self.engine,
            truncate=True,
            async_scheduling=self.async_scheduling,
            client_tags=self.client_tags,
        )

    def spec(self, policy: str) -> PolicySpec:
        """``policy`` as the simulator runs it (continuum with the bundle)."""
        return PolicySpec(policy, bundle=self.bundle if policy == "continuum" else None)

    def router_settings(self, router: str, model: str) -> RouterSettings:
        """The settings the live ``router`` is simulated with by the router model named
        ``model``: those given for it, else the model's defaults."""
        return self.settings.get(router) or RouterSettings(model)
