"""smetric-epp on an upstream EndpointPickerConfig and the upstream picker's flags.

The configs below are upstream's own: GIE v1.0.0 ``config/charts/inferencepool/templates/
epp-config.yaml`` (the chart's default) and llm-d-inference-scheduler v0.8.0
``deploy/config/pd-epp-config.yaml`` (P/D with the prefix-based decider).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from smetric.core.pickerflags import build_parser
from smetric.epp.config import ConfigError, load_picker_config, policy_params, read_config
from smetric.epp.settings import PickerSettings
from smetric.epp.upstream.flags import go_duration_s, resolve
from smetric.policy.bailian import BailianParams
from smetric.policy.registry import POLICY_NAMES

ENVELOPE = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
GIE_DEFAULT = (
    ENVELOPE
    + """\
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: prefix-cache-scorer
"""
)
LLMD_PD = (
    ENVELOPE
    + """\
featureGates:
- prepareDataPlugins
plugins:
- type: disagg-headers-handler
- type: prefix-cache-scorer
  parameters:
    maxPrefixBlocksToMatch: 256
    lruCapacityPerServer: 31250
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
"""
)


def _read(text: str) -> Any:
    return read_config(yaml.safe_load(text), "test.yaml")


def test_the_gie_chart_default_maps_to_the_nearest_policy_with_a_warning() -> None:
    loaded = _read(GIE_DEFAULT)
    assert loaded.upstream and loaded.config.policy.name == "bailian"
    # prefix weight 1 of 3: Bailian's KV-reuse weight
    assert policy_params(loaded.config).get(BailianParams).bailian_lambda == pytest.approx(1 / 3, abs=1e-3)
    (warning,) = loaded.warnings
    assert "prefix-cache-scorer(1)" in warning and "'bailian'" in warning and "smetric-picker" in warning
    assert not loaded.config.pdDisaggregation.enabled


def test_the_llmd_pd_config_enables_selective_pd_with_its_threshold() -> None:
    loaded = _read(LLMD_PD)
    assert loaded.config.pdDisaggregation.enabled
    assert loaded.config.pdDisaggregation.nonCachedTokens == 16
    assert loaded.config.policy.name == "bailian"  # from the prefill profile: weights 2 and 1
    assert policy_params(loaded.config).get(BailianParams).bailian_lambda == pytest.approx(2 / 3, abs=1e-3)
    assert all("featureGates" not in w for w in loaded.warnings)


def test_smetric_picker_plugin_names_the_policy_and_its_parameters() -> None:
    loaded = _read(
        ENVELOPE
        + """\
plugins:
- name: router
  type: smetric-picker
  parameters: {policy: smetric, slack: 1.5, servedModels: [qwen]}
- type: utilization-detector
  parameters: {queueDepthThreshold: 7, kvCacheUtilThreshold: 0.9}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: router}]
"""
    )
    cfg = loaded.config
    assert (cfg.policy.name, cfg.policy.parameters, cfg.servedModels) == (
        "smetric",
        {"slack": 1.5},
        ("qwen",),
    )
    assert (cfg.saturation.queueDepthThreshold, cfg.saturation.kvCacheUtilThreshold) == (7, 0.9)
    assert loaded.warnings == ()
    policy_params(cfg)  # the parameters validate as the picker's own format's do


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_built_in_policy_is_a_plugin_type(name: str) -> None:
    loaded = _read(
        ENVELOPE
        + f"plugins:\n- type: {name}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: {name}\n"
    )
    assert loaded.config.policy.name == name and loaded.warnings == ()


def test_unknown_plugin_types_and_sections_warn_and_never_fail() -> None:
    loaded = _read(
        GIE_DEFAULT.replace(
            "- type: queue-scorer\n", "- type: queue-scorer\n- type: lora-affinity-scorer\n", 1
        )
        + "futureSection: {x: 1}\n"
    )
    assert loaded.config.policy.name == "bailian"
    joined = "\n".join(loaded.warnings)
    assert "'lora-affinity-scorer' has no equivalent" in joined and "futureSection" in joined


@pytest.mark.parametrize(
    ("scorers", "policy"),
    [
        (["queue-scorer", "load-aware-scorer"], "load-balance"),
        (["prefix-cache-scorer"], "bailian"),
        (["session-affinity-scorer", "queue-scorer"], "llmd-session"),
        (["latency-scorer", "prefix-cache-scorer"], "llmd-slo"),
        ([], "random"),
    ],
)
def test_scorer_sets_map_to_documented_policies(scorers: list[str], policy: str) -> None:
    plugins = "".join(f"- type: {t}\n" for t in [*scorers, "max-score-picker"])
    refs = "".join(f"  - pluginRef: {t}\n" for t in [*scorers, "max-score-picker"])
    loaded = _read(ENVELOPE + f"plugins:\n{plugins}schedulingProfiles:\n- name: d\n  plugins:\n{refs}")
    assert loaded.config.policy.name == policy


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: d, plugins: [{pluginRef: nope}]}]",
            "nope",
        ),
        (
            "plugins: [{type: smetric}, {type: lmetric}]\nschedulingProfiles: []",
            "more than one routing policy",
        ),
        ("plugins: [{type: smetric-picker, parameters: {policy: nope}}]", "unknown policy 'nope'"),
        ("plugins: [{type: queue-scorer}, {type: queue-scorer}]", "two plugins are named 'queue-scorer'"),
        ("plugins: [{type: smetric, parameters: {slack: fast}}]", "slack"),
        ("plugins: {type: smetric}", "plugins"),
    ],
)
def test_configs_that_cannot_mean_anything_are_refused_with_the_field(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        policy_params(_read(ENVELOPE + text).config)


def test_config_text_and_file_are_exclusive(tmp_path: Any) -> None:
    assert load_picker_config(None, GIE_DEFAULT).config.policy.name == "bailian"
    path = tmp_path / "c.yaml"
    path.write_text("policy: {name: lmetric}\n")  # the picker's own format keeps working
    assert load_picker_config(str(path)).config.policy.name == "lmetric"
    with pytest.raises(ConfigError, match="mutually exclusive"):
        load_picker_config(str(path), GIE_DEFAULT)
    with pytest.raises(ConfigError, match="--config-text: not valid YAML"):
        load_picker_config(None, "a: [")


def test_go_durations() -> None:
    assert go_duration_s("50ms") == pytest.approx(0.05)
    assert go_duration_s("1m30s") == pytest.approx(90.0)
    assert go_duration_s("1.5h") == pytest.approx(5400.0)
    assert go_duration_s("250us") == pytest.approx(2.5e-4)
    for bad in ("", "5", "5 s", "s", "1d"):
        with pytest.raises(ValueError, match="not a duration"):
            go_duration_s(bad)


def _flags(*argv: str) -> Any:
    return resolve(build_parser().parse_args(list(argv)))


def test_upstream_flags_take_their_upstream_meaning() -> None:
    s = PickerSettings.from_argv(
        [
            "--pool-name=p",
            "--refresh-metrics-interval=200ms",
            "--metrics-staleness-threshold=5s",
            "--refresh-prometheus-metrics-interval=3s",
            "--health-checking",
            "--disable-endpoint-subset-filter",
            "--config-text=plugins: []",
            "--total-queued-requests-metric=vllm:num_requests_waiting",
            "--lora-info-metric=",
        ]
    )
    assert (s.refresh_interval_s, s.staleness_s, s.pool_gauge_interval_s) == pytest.approx((0.2, 5.0, 3.0))
    assert s.health_checking and not s.subset_filter and s.config_text == "plugins: []"
    assert s.metrics_auth  # upstream's default where there is a Kubernetes API
    assert not PickerSettings.from_argv(["--endpoints=127.0.0.1:1"]).metrics_auth
    assert _flags("--zap-log-level=debug").log_level == "debug"
    assert _flags("--zap-devel").log_level == "debug"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["--total-queued-requests-metric=nv_trt_llm_request_metrics{request_type=waiting}"],
            "vLLM's metrics",
        ),
        (["--endpoint-selector=app=vllm", "--endpoint-target-ports=8000"], "--endpoints"),
        (["--model-server-metrics-scheme=https"], "only http"),
        (["--model-server-metrics-path=/m"], "only /metrics"),
        (["--model-server-metrics-port=9000"], "target port"),
        (["--enable-cert-reload"], "read once"),
        (["--refresh-metrics-interval=fast"], "not a duration"),
        (["--metrics-staleness-threshold=0s"], "positive"),
        (["--endpoints=127.0.0.1:1", "--metrics-endpoint-auth=true"], "Kubernetes API"),
        (["--endpoints=127.0.0.1:1", "--ha-enable-leader-election"], "Lease"),
        (["--zap-log-level=loud"], "zap-log-level"),
        (["--kubeconfig=/nonexistent/kubeconfig"], "no such file"),
    ],
)
def test_upstream_flags_without_an_equivalent_are_refused_with_the_reason(
    argv: list[str], match: str
) -> None:
    errors = _flags("--pool-name=p", *argv).errors if "--endpoints" not in argv[0] else _flags(*argv).errors
    assert any(match in e for e in errors), errors
    with pytest.raises(ValueError, match=match):
        PickerSettings.from_argv(argv if "--endpoints" in argv[0] else ["--pool-name=p", *argv])


def test_main_exits_2_with_the_reason_for_a_refused_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from smetric.epp.main import main

    assert main(["--endpoints=127.0.0.1:1", "--kv-cache-usage-percentage-metric=foo"]) == 2
    assert "vLLM's metrics" in capsys.readouterr().err
    assert (
        main(["--endpoints=127.0.0.1:1", f"--config-text={ENVELOPE}plugins: [{{type: x}}, {{type: x}}]"]) == 2
    )
    assert "two plugins are named 'x'" in capsys.readouterr().err


def test_the_pre_decider_pd_handler_threshold_maps_to_tokens() -> None:
    """llm-d v0.3-v0.5: pd-profile-handler's threshold counts characters (0 = always P/D)."""
    text = (
        ENVELOPE
        + """\
plugins:
- type: pd-profile-handler
  parameters: {threshold: 100, hashBlockSize: 64}
- type: prefix-cache-scorer
schedulingProfiles:
- {name: prefill, plugins: [{pluginRef: prefix-cache-scorer}]}
- {name: decode, plugins: [{pluginRef: prefix-cache-scorer}]}
"""
    )
    loaded = _read(text)
    assert loaded.config.pdDisaggregation.enabled and loaded.config.pdDisaggregation.nonCachedTokens == 25
    assert any("threshold 100 (characters" in w for w in loaded.warnings)
    always = _read(text.replace("threshold: 100", "threshold: 0"))
    assert always.config.pdDisaggregation.nonCachedTokens is None


def test_scorers_beside_a_named_policy_are_reported_as_ignored() -> None:
    loaded = _read(
        ENVELOPE
        + "plugins: [{type: smetric}, {type: queue-scorer}]\n"
        + "schedulingProfiles: [{name: d, plugins: [{pluginRef: smetric}, {pluginRef: queue-scorer, weight: 3}]}]\n"
    )
    assert loaded.config.policy.name == "smetric"
    (warning,) = loaded.warnings
    assert "scores alone" in warning and "queue-scorer" in warning
