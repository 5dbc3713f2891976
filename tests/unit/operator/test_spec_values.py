"""The SMetricPool spec, the operator's trust boundary, asserted value by value (docs/mutation.md).

Every expected value is written out here rather than derived from the spec's own constants, so a
change to a default, a bound or a validation rule fails a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from smetric.operator.spec import InvalidSpecError, SMetricPoolSpec, parse_spec, quantity_bytes


def raw(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": {"name": "org/m"}, "topology": {"replicas": 1}}
    out.update(over)
    return out


def parse(**over: Any) -> SMetricPoolSpec:
    return parse_spec(raw(**over))


def rejects(fragment: str, **over: Any) -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(**over)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    "over, location",
    [
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"model": {"name": "m", "bogus": 1}}, "model.bogus"),
        ({"model": {"name": "m", "storage": {"claimName": "c", "bogus": 1}}}, "model.storage.bogus"),
        ({"model": {"name": "m", "hfTokenSecret": {"name": "s", "bogus": 1}}}, "model.hfTokenSecret.bogus"),
        ({"router": {"bogus": 1}}, "router.bogus"),
        ({"router": {"pod": {"bogus": 1}}}, "router.pod.bogus"),
        ({"router": {"parameters": {"costModel": {"cLinS": 1, "cAttS": 0, "x": 1}}}}, "costModel.x"),
        ({"gpus": {"bogus": 1}}, "gpus.bogus"),
        ({"gpus": {"rdma": {"resourceName": "r", "bogus": 1}}}, "gpus.rdma.bogus"),
        ({"globalKV": {"bogus": 1}}, "globalKV.bogus"),
        ({"globalKV": {"master": {"bogus": 1}}}, "globalKV.master.bogus"),
        ({"globalKV": {"lmcache": {"bogus": 1}}}, "globalKV.lmcache.bogus"),
        ({"engine": {"bogus": 1}}, "engine.bogus"),
        ({"observability": {"bogus": 1}}, "observability.bogus"),
        ({"policies": {"bogus": 1}}, "policies.bogus"),
        ({"gateway": {"parentRef": {"name": "g", "bogus": 1}}}, "gateway.parentRef.bogus"),
        ({"gateway": {"parentRef": {"name": "g"}, "bogus": 1}}, "gateway.bogus"),
        ({"topology": {"replicas": 1, "bogus": 1}}, "topology.bogus"),
        ({"topology": {"replicas": 1, "routingSidecar": {"bogus": 1}}}, "topology.routingSidecar.bogus"),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "bogus": 1},
                    "decode": {"replicas": 1},
                }
            },
            "topology.prefill.bogus",
        ),
    ],
)
def test_unknown_keys_are_refused_at_every_level(over: dict[str, Any], location: str) -> None:
    rejects(location, **over)


def test_spec_is_frozen_and_accepts_field_names() -> None:
    s = parse(model={"name": "m", "block_size": 32})
    assert s.model.block_size == 32  # populate_by_name: the Python name works as well as blockSize
    with pytest.raises(ValueError, match="frozen"):
        s.model.name = "x"
    with pytest.raises(ValueError, match="frozen"):
        s.router = s.router  # the whole spec too, not only its parts
    assert parse(global_kv={"enabled": True}).global_kv.enabled  # top-level Python names too


def test_defaults() -> None:
    s = parse()
    m, t, g, kv, r = s.model, s.topology, s.gpus, s.global_kv, s.router
    assert (m.served_name, m.image, m.command, m.extra_args) == (None, "vllm/vllm-openai:v0.32.0", (), ())
    assert (m.tensor_parallel_size, m.max_model_len, m.block_size, m.kv_cache_dtype) == (1, None, 16, "auto")
    assert (m.gpu_memory_utilization, m.storage, m.hf_token_secret, m.env) == (None, None, None, ())
    assert m.served == "org/m" and parse(model={"name": "a", "servedName": "b"}).model.served == "b"
    assert (t.mode, t.autoscaled, t.prefill, t.decode, t.pd_connector) == (
        "colocated",
        False,
        None,
        None,
        "nixl",
    )
    assert (g.count_per_pod, g.products, g.tolerations, g.rdma) == (
        1,
        ("NVIDIA-H20", "NVIDIA-H20-3e"),
        (),
        None,
    )
    assert (g.shm_size, g.resources) == ("16Gi", {})
    assert (kv.enabled, kv.mooncake_image) == (False, "ghcr.io/smetric/mooncake-master:0.3.13.post1-cuda13")
    assert (kv.segment_size, kv.local_buffer_size, kv.protocol, kv.device_names) == ("32Gi", "2Gi", "tcp", ())
    master = kv.master
    assert (master.rpc_port, master.metadata_port, master.metrics_port) == (50051, 8080, 9003)
    assert master.eviction_high_watermark_ratio == 0.9
    assert master.resources == {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    assert (kv.lmcache.chunk_size, kv.lmcache.max_local_cpu_size_gb) == (256, 5.0)
    assert (r.policy, r.prefix_index, r.image, r.replicas) == (
        None,
        None,
        "ghcr.io/smetric/smetric-epp:0.1.0",
        None,
    )
    assert r.resources == {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
    assert (r.failure_mode, r.hash_seed, r.secure_serving, r.cert_secret_name) == (
        "FailClose",
        "0",
        True,
        None,
    )
    assert r.decision_log is False
    p = r.parameters
    assert (p.ttft_slo_base_s, p.ttft_slo_per_k_tok_s, p.tpot_slo_s) == (1.0, 0.0625, 0.02)
    assert (p.cost_model, p.global_fetch_s_per_token, p.policy_owned) == (None, None, {})
    assert (s.engine.host_memory, s.engine.drain_s) == ("32Gi", 300)
    assert (s.observability.pod_monitor, s.observability.service_monitor) == (False, False)
    assert (s.protection.network_policy, s.protection.pod_disruption_budget) == (True, True)
    assert s.policies is None
    assert s.gateway is None
    pod = r.pod
    assert (pod.resources, pod.env, pod.volumes, pod.volume_mounts, pod.node_selector) == ({}, (), (), (), {})
    assert (pod.affinity, pod.tolerations, pod.image_pull_secrets, pod.annotations) == ({}, (), (), {})
    assert pod.priority_class_name is None
    st = parse(model={"name": "m", "storage": {"claimName": "c"}, "hfTokenSecret": {"name": "s"}}).model
    assert st.storage is not None and st.hf_token_secret is not None
    assert (st.storage.mount_path, st.storage.read_only, st.storage.hf_cache) == ("/models", True, True)
    assert st.hf_token_secret.key == "HF_TOKEN"
    role = parse(
        topology={"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2}}
    ).topology.prefill
    assert role is not None
    assert (role.autoscaled, role.tensor_parallel_size, role.gpus_per_pod, role.extra_args) == (
        False,
        None,
        None,
        (),
    )
    rdma = parse(gpus={"rdma": {"resourceName": "rdma/ib"}}).gpus.rdma
    assert rdma is not None and rdma.count == 1
    gw = parse(gateway={"parentRef": {"name": "g"}}).gateway
    assert gw is not None
    assert (gw.path, gw.hostnames, gw.match_model_header, gw.provider, gw.parent_ref.namespace) == (
        "/",
        (),
        False,
        "none",
        None,
    )


def test_routing_policy_default_follows_the_global_tier() -> None:
    assert parse().routing_policy == "smetric"  # one default with or without a tier since 5 Dec 2026
    assert parse(globalKV={"enabled": True}).routing_policy == "smetric"
    assert parse(router={"policy": "lmetric"}).routing_policy == "lmetric"
    assert parse(router={"policy": "smetric"}).routing_policy == "smetric"


def _set(path: str, value: Any) -> dict[str, Any]:
    """``raw()`` with the dotted camelCase ``path`` set to ``value``."""
    out = raw()
    if path.startswith("topology.prefill."):
        out["topology"] = {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    if "tensorParallelSize" in path:
        out["gpus"] = {"countPerPod": 0}  # CPU-only: no divisibility rule
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


# (path, the last accepted value, the first refused value) at each bound of the spec
BOUNDS: list[tuple[str, Any, Any]] = [
    ("model.tensorParallelSize", 1, 0),
    ("model.tensorParallelSize", 64, 65),
    ("model.maxModelLen", 1, 0),
    ("model.blockSize", 16, 0),
    ("model.blockSize", 1024, 1040),
    ("model.gpuMemoryUtilization", 1.0, 1.01),
    ("model.gpuMemoryUtilization", 0.01, 0.0),
    ("model.name", "m", ""),
    ("topology.replicas", 0, -1),
    ("topology.replicas", 1024, 1025),
    ("topology.prefill.replicas", 0, -1),
    ("topology.prefill.replicas", 1024, 1025),
    ("topology.prefill.gpusPerPod", 0, -1),
    ("topology.prefill.gpusPerPod", 64, 65),
    ("topology.prefill.tensorParallelSize", 1, 0),
    ("topology.prefill.tensorParallelSize", 64, 65),
    ("gpus.countPerPod", 0, -1),
    ("gpus.countPerPod", 64, 65),
    ("globalKV.master.rpcPort", 1, 0),
    ("globalKV.master.rpcPort", 65535, 65536),
    ("globalKV.master.metadataPort", 1, 0),
    ("globalKV.master.metadataPort", 65535, 65536),
    ("globalKV.master.metricsPort", 1, 0),
    ("globalKV.master.metricsPort", 65535, 65536),
    ("globalKV.master.evictionHighWatermarkRatio", 1.0, 1.01),
    ("globalKV.master.evictionHighWatermarkRatio", 0.01, 0.0),
    ("globalKV.lmcache.chunkSize", 16, 15),
    ("globalKV.lmcache.maxLocalCpuSizeGB", 0.0, -0.1),
    ("router.replicas", 0, -1),
    ("router.replicas", 16, 17),  # the default (precise) index
    ("router.hashSeed", "42", "x1"),
    ("router.parameters.ttftSloBaseS", 0.01, 0.0),
    ("router.parameters.ttftSloPerKTokS", 0.0, -0.01),
    ("router.parameters.tpotSloS", 0.001, 0.0),
    ("router.parameters.globalFetchSPerToken", 0.0, -1e-9),
    ("router.parameters.costModel", {"cLinS": 1e-9, "cAttS": 0.0}, {"cLinS": 0.0, "cAttS": 0.0}),
    ("router.parameters.costModel", {"cLinS": 1e-9, "cAttS": 0.0}, {"cLinS": 1e-9, "cAttS": -1e-9}),
    ("topology.routingSidecar.image", "i", ""),
    ("topology.routingSidecar.tag", "t", ""),
    ("engine.drainS", 0, -1),
    ("engine.drainS", 3600, 3601),
    ("model.storage", {"claimName": "c", "mountPath": "/w"}, {"claimName": "c", "mountPath": "w"}),
    ("model.storage", {"claimName": "c"}, {"claimName": ""}),
    ("model.hfTokenSecret", {"name": "s", "key": "k"}, {"name": "s", "key": ""}),
    ("model.hfTokenSecret", {"name": "s"}, {"name": ""}),
    ("gpus.rdma", {"resourceName": "r", "count": 1}, {"resourceName": "r", "count": 0}),
    ("gpus.rdma", {"resourceName": "r"}, {"resourceName": ""}),
    ("gateway", {"parentRef": {"name": "g"}, "path": "/v1"}, {"parentRef": {"name": "g"}, "path": "v1"}),
    ("gateway", {"parentRef": {"name": "g"}}, {"parentRef": {"name": ""}}),
]


@pytest.mark.parametrize("path, ok, bad", BOUNDS)
def test_bounds(path: str, ok: Any, bad: Any) -> None:
    parse_spec(_set(path, ok))
    with pytest.raises(InvalidSpecError) as err:
        parse_spec(_set(path, bad))
    assert path.split(".")[-1] in str(err.value)


def test_block_size_above_its_bound_is_refused_by_the_bound() -> None:
    rejects(
        "model.blockSize: Input should be less than or equal to 1024", model={"name": "m", "blockSize": 1025}
    )


def test_gpus_per_pod_zero_is_a_cpu_only_role_whatever_its_tensor_parallel_size() -> None:
    s = parse_spec(
        _set("topology.prefill.gpusPerPod", 0)
        | {"model": {"name": "m", "tensorParallelSize": 2}, "gpus": {"countPerPod": 2}}
    )
    assert s.topology.prefill is not None and s.topology.prefill.gpus_per_pod == 0
    assert (
        parse(gpus={"countPerPod": 0}, model={"name": "m", "tensorParallelSize": 4}).gpus.count_per_pod == 0
    )


@pytest.mark.parametrize(
    "quantity, expected",
    [
        ("0", 0),
        ("512", 512),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("3G", 3_000_000_000),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1Ki", 1024),
        ("2Mi", 2 * 1024**2),
        ("32Gi", 34_359_738_368),
        ("1Ti", 1024**4),
        ("1Pi", 1024**5),
        ("1.5Gi", 1_610_612_736),
        (" 16Gi ", 16 * 1024**3),
    ],
)
def test_quantity_bytes(quantity: str, expected: int) -> None:
    assert quantity_bytes(quantity) == expected


@pytest.mark.parametrize("bad", ["", "Gi", "1.Gi", "1KiB", "-1Gi", "1 Gi", "1e3"])
def test_quantity_bytes_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a memory quantity like 32Gi or 500M"):
        quantity_bytes(bad)


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"gpus": {"shmSize": "1X"}}, "gpus.shmSize: '1X' is not a memory quantity"),
        ({"globalKV": {"segmentSize": "lots"}}, "globalKV.segmentSize"),
        ({"globalKV": {"localBufferSize": "2GB"}}, "globalKV.localBufferSize"),
        ({"engine": {"hostMemory": "32 Gi"}}, "engine.hostMemory"),
        ({"globalKV": {"deviceNames": ["mlx5 0"]}}, "device name 'mlx5 0' must match [A-Za-z0-9_.-]+"),
        ({"globalKV": {"deviceNames": [""]}}, "device name ''"),
        ({"model": {"name": "m", "blockSize": 24}}, "model.blockSize=24 must be a multiple of 16"),
        (
            {"gpus": {"countPerPod": 3}, "model": {"name": "m", "tensorParallelSize": 2}},
            "model.tensorParallelSize=2 must divide gpus.countPerPod=3",
        ),
        (
            {"model": {"name": "m", "tensorParallelSize": 2}},
            "model.tensorParallelSize=2 must divide gpus.countPerPod=1",
        ),
        (
            {
                "gpus": {"countPerPod": 2},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "tensorParallelSize": 2, "gpusPerPod": 1},
                    "decode": {"replicas": 1},
                },
            },
            "topology.prefill: tensorParallelSize=2 must divide gpusPerPod=1",
        ),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1},
                    "pdConnector": "mooncake",
                    "routingSidecar": {"tag": "v0.8.0"},
                },
            },
            "topology.pdConnector=mooncake needs a routing sidecar",
        ),
        (
            {
                "gpus": {"countPerPod": 4},
                "topology": {"mode": "disaggregated", "decode": {"replicas": 1, "tensorParallelSize": 3}},
            },
            "topology.decode: tensorParallelSize=3 must divide gpusPerPod=4",  # checked without a prefill
        ),
        ({"router": {"policy": "nope"}}, "router.policy='nope' is not one of"),
        ({"router": {"parameters": {"bogus": 1}}}, "router.parameters: unknown key(s) bogus"),
        (
            {"globalKV": {"enabled": True, "protocol": "rdma"}},
            "globalKV.protocol=rdma requires globalKV.deviceNames",
        ),
        ({"topology": {"replicas": None}}, "topology.mode=colocated requires topology.replicas"),
        (
            {"topology": {"replicas": 1, "prefill": {"replicas": 1}}},
            "topology.prefill/decode are only valid with mode=disaggregated",
        ),
        (
            {"topology": {"replicas": 1, "decode": {"replicas": 1}}},
            "topology.prefill/decode are only valid with mode=disaggregated",
        ),
        (
            {"topology": {"mode": "disaggregated", "prefill": {"replicas": 1}}},
            "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas",
        ),
        (
            {"topology": {"mode": "disaggregated", "decode": {"replicas": 1}}},
            "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas",
        ),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "replicas": 2,
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1},
                }
            },
            "topology.replicas is only valid with mode=colocated",
        ),
        (
            {
                "gpus": {"countPerPod": 4},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "tensorParallelSize": 3},
                    "decode": {"replicas": 1},
                },
            },
            "topology.prefill: tensorParallelSize=3 must divide gpusPerPod=4",
        ),
        (
            {
                "model": {"name": "m", "tensorParallelSize": 2},
                "gpus": {"countPerPod": 2},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1, "gpusPerPod": 3},
                },
            },
            "topology.decode: tensorParallelSize=2 must divide gpusPerPod=3",
        ),
    ],
)
def test_invalid_specs_name_the_problem(over: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(**over)
    # each problem starts its own "; "-separated item (after the field's location, if any)
    parts = str(err.value).split("; ")
    assert any(p.startswith(fragment) or f": {fragment}" in p for p in parts), parts


def test_several_problems_are_reported_together_without_pydantic_prefixes() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(model={"name": "m", "blockSize": 24}, router={"policy": "nope"})
    msg = str(err.value)
    assert msg.startswith("model.blockSize=24 must be a multiple of 16; router.policy='nope'")
    assert "Value error" not in msg


def test_field_errors_are_reported_together() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(model={"name": "m", "blockSize": 0}, router={"replicas": -1})
    items = str(err.value).split("; ")
    assert [i.split(":")[0] for i in items] == ["model.blockSize", "router.replicas"]


def test_valid_cross_field_combinations() -> None:
    assert parse(globalKV={"enabled": True, "protocol": "rdma", "deviceNames": ["mlx5_0", "a.b-c"]})
    assert parse(globalKV={"protocol": "rdma"})  # rdma without the tier enabled needs no device
    assert parse(gpus={"countPerPod": 4}, model={"name": "m", "tensorParallelSize": 2})
    assert parse(model={"name": "m", "blockSize": 32}).model.block_size == 32
    role = {"replicas": 1, "tensorParallelSize": 2, "gpusPerPod": 2}
    s = parse(gpus={"countPerPod": 3}, topology={"mode": "disaggregated", "prefill": role, "decode": role})
    assert s.topology.decode is not None and s.topology.decode.gpus_per_pod == 2


def test_a_colocated_pool_runs_no_sidecar_so_its_tag_is_not_checked() -> None:
    s = parse(topology={"replicas": 1, "pdConnector": "mooncake", "routingSidecar": {"tag": "v0.8.0"}})
    assert s.topology.routing_sidecar.tag == "v0.8.0"


def test_policy_owned_parameters_are_kept_as_given() -> None:
    p = parse(router={"policy": "smetric", "parameters": {"slack": 1.5, "hitRatio": 0.4}}).router.parameters
    assert p.policy_owned == {"slack": 1.5, "hitRatio": 0.4}
    rejects("router.parameters", router={"parameters": {"slack": "fast"}})


def test_policy_context_is_typed_and_kept_apart_from_policy_owned_keys() -> None:
    p = parse(
        router={"parameters": {"costModel": {"cLinS": 1e-4, "cAttS": 0.0}, "tpot_slo_s": 0.05, "slack": 2.0}}
    ).router.parameters
    assert p.cost_model is not None and (p.cost_model.c_lin_s, p.cost_model.c_att_s) == (1e-4, 0.0)
    assert p.tpot_slo_s == 0.05  # the Python name works as well as tpotSloS
    assert p.policy_owned == {"slack": 2.0}
    with pytest.raises(ValueError, match="frozen"):
        p.tpot_slo_s = 1.0


def test_deprecated_policies_name() -> None:
    assert parse(policies={"podDisruptionBudget": False}).protection.pod_disruption_budget is False
    same = {"networkPolicy": False}
    assert parse(policies=same, protection=same).protection.network_policy is False
    with pytest.raises(InvalidSpecError) as err:
        parse(policies={"podDisruptionBudget": False}, protection={"podDisruptionBudget": True})
    assert str(err.value) == (
        "protection and its deprecated name policies are both set, to different values; set protection only"
    )


def test_spec_must_be_a_mapping() -> None:
    with pytest.raises(InvalidSpecError, match=r"^spec must be a mapping$"):
        parse_spec(["model"])


def test_router_parameters_read_camel_case_names_and_stay_frozen() -> None:
    """router.parameters (spec_params.PolicyParameters): the untyped-alias field (costModel) is read
    by the alias generator, field names work too, and a parsed value cannot be changed."""
    import pydantic

    from smetric.operator.spec_params import PolicyParameters

    p = PolicyParameters.model_validate({"costModel": {"cLinS": 1e-4, "cAttS": 0.0}, "tpotSloS": 0.03})
    assert p.cost_model is not None and p.cost_model.c_lin_s == 1e-4 and p.tpot_slo_s == 0.03
    assert p.policy_owned == {}  # costModel is a typed field, not a policy-owned extra
    assert PolicyParameters(tpot_slo_s=0.05).tpot_slo_s == 0.05  # populate_by_name
    with pytest.raises(pydantic.ValidationError):
        p.tpot_slo_s = 0.5  # type: ignore[misc]
