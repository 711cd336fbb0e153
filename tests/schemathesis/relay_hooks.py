"""Schemathesis hooks of `cargo xtask schemathesis`.

- Generated bodies may hold URLs (`first_frame`, `audio_url`, an asset's `url`, ...) that the
  relay would fetch. The run stays on loopback: every string that looks like a URL is pointed
  at a loopback address before the request is sent. The relay refuses private addresses, so
  the fetch path still runs (and answers its `invalid image` / `invalid audio` / ... error)
  without a byte leaving the machine.
- The run's own key (`RELAY_PROTECTED_KEY_ID`) is listed by `GET /admin/keys`, and the
  stateful phase would revoke or change it with the id it found there, failing every later
  request with 401. `DELETE` and `PATCH` of that key go to an id that does not exist instead.
"""

import os

import schemathesis

LOOPBACK_URL = "http://127.0.0.1:9/schemathesis"
PROTECTED_KEY_ID = os.environ.get("RELAY_PROTECTED_KEY_ID", "")


def _tame(value):
    if isinstance(value, str):
        return LOOPBACK_URL if "://" in value else value
    if isinstance(value, dict):
        return {k: _tame(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tame(v) for v in value]
    return value


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if isinstance(body, (dict, list, str)):
        tamed = _tame(body)
        if tamed != body:
            case.body = tamed
    params = case.path_parameters
    if (
        PROTECTED_KEY_ID
        and case.method.upper() in ("DELETE", "PATCH")
        and isinstance(params, dict)
        and params.get("key_id") == PROTECTED_KEY_ID
    ):
        params["key_id"] = "key_schemathesis_protected"
