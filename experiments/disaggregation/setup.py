"""Each pool's setup from a config with a [deployment] table: the same setup any
simulation gets (experiments/setup/simulation.py), once per pool with that pool's TP,
and the KV transfer between them (the model's KV bytes per token over the link)."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.model.presets import lookup_model
from batchlab.core.pd_deployment import PDDeployment, Pool
from batchlab.experiments.config import ExperimentConfig, HardwareConfig
from batchlab.experiments.disaggregation.config import DeploymentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.dtypes import served_model
from batchlab.experiments.setup.simulation import SimSetup, sim_setup

POOLS = ("prefill", "decode")


@dataclass
class PDSetup:
    prefill: SimSetup
    decode: SimSetup
    transfer: KVTransfer
    config: DeploymentConfig
    router: str  # [run] router: a pool's where [deployment] names none
    gpus: dict[str, int]  # GPUs a replica of each pool holds (TP x PP)

    def deployment(self, run: str) -> PDDeployment:
        """Run `run`'s deployment: both pools under that run's policy."""
        d = self.config
        return PDDeployment(  # a [kv_tier] below every replica of both pools, sized by its pool's TP
            Pool(d.prefill_replicas, self.prefill.schedulers[run], self.prefill.cost, self.prefill.blocks,
                 d.prefill_router or self.router, self.gpus["prefill"], **self.prefill.tier_options),
            Pool(d.decode_replicas, self.decode.schedulers[run], self.decode.cost, self.decode.blocks,
                 d.decode_router or self.router, self.gpus["decode"], **self.decode.tier_options),
            self.transfer)

    @property
    def runs(self) -> list[str]:
        return list(self.decode.schedulers)

    def assumptions(self) -> list[str]:
        d, link, t = self.config, self.transfer.link, self.transfer
        return [f"prefill pool: {d.prefill_replicas} x TP{d.prefill_tp}, {self.prefill.blocks} KV blocks each; "
                f"decode pool: {d.decode_replicas} x TP{d.decode_tp}, {self.decode.blocks} KV blocks each",
                f"KV transfer: {t.bytes_per_token:,} bytes a prompt token over {link.name} "
                f"({link.bandwidth / 1e9:g} GB/s one way per GPU x {t.lanes} lane(s), "
                f"{link.latency_s * 1e6:g} us a transfer; {link.source}); " + (
                    f"sent layer by layer ({t.layers} layers) as the prefill's last step computes them "
                    f"(overlap = layers)" if t.layers else
                    "sent whole after the prefill (vLLM's NIXL connector does no layer-wise overlap, "
                    "vllm-project/vllm 002a1057)") + "; the first token comes from the prefill pool"]


def with_tp(cfg: ExperimentConfig, tp: int, where: str) -> ExperimentConfig:
    """cfg with its replicas over `tp` GPUs, [hardware]'s checks run again."""
    try:
        # Only what was given (a field marked given changes the setup: roofline constants
        # given choose the roofline over a GPU profile), and this pool's TP.
        hw = HardwareConfig.model_validate({**cfg.hardware.model_dump(exclude_unset=True), "tensor_parallel": tp})
    except ValueError as e:
        raise UserError(f"{where}: {str(e).splitlines()[-1].strip()}") from None
    return cfg.model_copy(update={"hardware": hw})


def pd_setup(cfg: ExperimentConfig, model_named: bool = False, hardware_named: bool = False) -> PDSetup:
    """Both pools' setups; a pool that cannot hold the model is an error naming its TP."""
    d = cfg.deployment
    assert d is not None, "pd_setup needs a [deployment] table"
    if cfg.profile.path:
        raise UserError("[deployment] with [profile]: a calibration profile prices the one layout it "
                        "was measured on; the pools are priced from [hardware] (roofline or GPU form)")
    if cfg.speculative.on:  # the pools emit one token a step: a draft's price alone would be wrong
        raise UserError("[speculative] (--speculative) with [deployment]: the prefill and decode pools are "
                        "simulated without speculative decoding; leave one of them out")
    if "replicas" in cfg.run.model_fields_set:
        raise UserError("run.replicas (--replicas): with [deployment] the replicas are "
                        "deployment.prefill_replicas and deployment.decode_replicas")
    setups, gpus = {}, {}
    for pool in POOLS:
        tp = getattr(d, f"{pool}_tp")
        where = f"deployment.{pool}_tp = {tp}"
        pool_cfg = with_tp(cfg, tp, where)
        gpus[pool] = pool_cfg.hardware.gpus
        try:
            setups[pool] = sim_setup(pool_cfg, model_named, hardware_named)
        except UserError as e:
            raise UserError(f"{where}: the {pool} pool cannot serve {cfg.model.name} on "
                            f"{cfg.hardware.name}: {e}") from None
    try:
        model = served_model(cfg, lookup_model(cfg.model.name))[0]
    except ValueError as e:
        raise UserError(str(e)) from None
    transfer = KVTransfer(d.link_spec(), model.kv_bytes_per_token, d.lanes,
                          model.num_layers if d.overlap == "layers" else 0)
    return PDSetup(setups["prefill"], setups["decode"], transfer, d, cfg.run.router, gpus)
