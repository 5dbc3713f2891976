"""Line memo of the metrics parser: the same result as a whole-page parse, bounded to the last page."""

from __future__ import annotations

import pytest

from smetric.epp.scrape.parse import LineMemo, MetricsParseError, parse_vllm_metrics, wanted_lines

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} {running}
vllm:num_requests_running{engine="1",model_name="m"} 1
vllm:num_requests_waiting{engine="0",model_name="m"} 2
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 60
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000",prefix_caching_hash_algo="sha256"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="3000"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3
vllm:num_requests_running_other 9
"""


def page(running: int | str) -> bytes:
    return PAGE.replace("{running}", str(running)).encode()


def test_memo_gives_the_whole_page_result_and_keeps_only_the_last_page() -> None:
    memo: LineMemo = {}
    for running in (3, 3, 4, 7):
        with_memo = parse_vllm_metrics(page(running), 1.0, memo)
        assert with_memo == parse_vllm_metrics(page(running), 1.0)
        assert with_memo.metrics.running == running + 1
        assert set(memo) == set(wanted_lines(page(running)).encode().split(b"\n")) - {b""}
    assert with_memo.metrics.kv_usage == pytest.approx((0.25 * 1000 + 0.75 * 3000) / 4000)
    assert with_memo.cache.num_gpu_blocks == 4000 and with_memo.cache.hash_algo == "sha256"
    assert len(memo) == 9  # the histogram and the look-alike series are not wanted lines


def test_refused_page_leaves_the_memo_as_it_was() -> None:
    memo: LineMemo = {}
    parse_vllm_metrics(page(3), 1.0, memo)
    before = dict(memo)
    with pytest.raises(MetricsParseError):
        parse_vllm_metrics(page("NaN"), 2.0, memo)
    with pytest.raises(MetricsParseError):
        parse_vllm_metrics(page(3).replace(b"} 2\n", b"} 2 x y z\n"), 2.0, memo)
    assert memo == before


def test_crlf_pages_and_tabs() -> None:
    crlf = page(5).replace(b"\n", b"\r\n")
    assert parse_vllm_metrics(crlf, 0.0, {}).metrics.running == 6
    tabbed = page(5).replace(b'model_name="m"} 2', b'model_name="m"}\t2')
    assert parse_vllm_metrics(tabbed, 0.0, {}).metrics.waiting == 2
