"""The llm-d routing sidecar on P/D decode pods: for each ``topology.pdConnector``, the sidecar
protocol that fills vLLM's ``kv_transfer_params`` the way that vLLM connector expects, the first
sidecar release that speaks it, and the image pulled when the pool names none.

Sources (the sidecar's ``--kv-connector`` values and flags):

* ``nixlv2``: llm-d/llm-d-inference-scheduler ``pkg/sidecar/proxy`` since v0.4.0 (flag
  ``--connector``; ``--kv-connector`` from v0.7.0, ``--connector`` deprecated); image
  ``ghcr.io/llm-d/llm-d-routing-sidecar`` up to v0.8.0, ``llm-d-router-disagg-sidecar`` after. It
  sends vLLM's NixlConnector params (``do_remote_decode`` to the prefiller, then its returned
  ``remote_*`` block ids to the decoder).
* ``mooncake``: llm-d/llm-d-router v0.9.0 (``pkg/sidecar/proxy/connector_mooncake.go``; image
  ``ghcr.io/llm-d/llm-d-router-disagg-sidecar``). vLLM's MooncakeConnector is push-based and needs
  a ``transfer_id`` on both hops and the prefiller's bootstrap address and engine id on the decode
  hop; the sidecar reads the engine id from the prefiller's bootstrap server
  (``--mooncake-bootstrap-port``, vLLM's ``VLLM_MOONCAKE_BOOTSTRAP_PORT``, both 8998 by default).
  A ``nixlv2`` sidecar sends no ``transfer_id``: vLLM logs "Missing transfer_id in kv_transfer_params
  from router!" and the decoder recomputes the prefill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MOONCAKE_BOOTSTRAP_PORT = 8998
KV_CONNECTOR_FLAG_SINCE = (0, 7, 0)  # older sidecars take --connector
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


@dataclass(frozen=True, slots=True)
class PdProtocol:
    sidecar: str  # the sidecar's --kv-connector value
    vllm: str  # vLLM's kv_connector on both roles
    since: tuple[int, int, int]  # first sidecar release that speaks it
    tag: str  # default tag when topology.routingSidecar leaves it out


# The repository was renamed at v0.9.0 (llm-d-inference-scheduler -> llm-d-router), and its image.
RENAMED_AT = (0, 9, 0)
IMAGE_BEFORE_RENAME = "ghcr.io/llm-d/llm-d-routing-sidecar"
IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar"
PD_PROTOCOLS: dict[str, PdProtocol] = {
    "nixl": PdProtocol("nixlv2", "NixlConnector", (0, 4, 0), "v0.8.0"),
    "mooncake": PdProtocol("mooncake", "MooncakeConnector", (0, 9, 0), "v0.10.0"),
}


def sidecar_version(tag: str) -> tuple[int, int, int] | None:
    """``vX.Y.Z`` (optionally ``-rc.N``) as a tuple; None for a tag that names no release."""
    match = _VERSION.match(tag)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def default_image(tag: str) -> str:
    version = sidecar_version(tag)
    return IMAGE_BEFORE_RENAME if version is not None and version < RENAMED_AT else IMAGE


def sidecar_image(pd_connector: str, image: str | None, tag: str | None) -> str:
    tag = tag or PD_PROTOCOLS[pd_connector].tag
    return f"{image or default_image(tag)}:{tag}"


def _fmt(version: tuple[int, int, int]) -> str:
    return "v" + ".".join(map(str, version))


def sidecar_problem(pd_connector: str, image: str | None, tag: str | None) -> str | None:
    """Why the pool's sidecar cannot speak its pdConnector, or None. A tag that names no release
    (a digest, a private build) is taken as speaking it."""
    protocol = PD_PROTOCOLS[pd_connector]
    version = sidecar_version(tag or protocol.tag)
    if version is None or version >= protocol.since:
        return None
    since = _fmt(protocol.since)
    return (
        f"topology.pdConnector={pd_connector} needs a routing sidecar that knows "
        f"--kv-connector={protocol.sidecar} ({default_image(since)} {since} or later); "
        f"topology.routingSidecar.tag={tag} does not: set a tag {since} or later, "
        f"or leave routingSidecar out ({default_image(protocol.tag)}:{protocol.tag})"
    )


def connector_args(pd_connector: str, tag: str | None) -> list[str]:
    """The sidecar flags that select the pool's P/D protocol."""
    protocol = PD_PROTOCOLS[pd_connector]
    version = sidecar_version(tag or protocol.tag)
    flag = "--connector" if version is not None and version < KV_CONNECTOR_FLAG_SINCE else "--kv-connector"
    args = [f"{flag}={protocol.sidecar}"]
    if pd_connector == "mooncake":
        args.append(f"--mooncake-bootstrap-port={MOONCAKE_BOOTSTRAP_PORT}")
    return args
