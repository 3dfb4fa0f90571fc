"""Re-signing AWS requests for the upstream (``llmsim record --resign-aws``).

A SigV4 signature covers the Host the client addressed: pointed at the recorder, a client signs for the
recorder's address, which AWS refuses. With ``--resign-aws`` the recorder signs each such request again for the
upstream, with the credentials botocore finds where the AWS SDKs look (the environment, the shared files, a
role), for the region and service the client's own signature named (its ``Credential=AKID/date/REGION/SERVICE/
aws4_request`` scope). botocore is needed for it (boto3 brings it); the cassette keeps only fingerprints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["resign"]

_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
_SIGNATURE_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256")


def resign(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
    """``headers`` with a SigV4 signature made for ``url`` (unchanged when the request was not SigV4-signed).
    Raises ``RuntimeError`` when botocore finds no credentials."""
    authorization = next((value for name, value in headers if name.lower() == "authorization"), "")
    scope = _SCOPE.search(authorization)
    if not authorization.startswith("AWS4-HMAC-SHA256") or scope is None:
        return list(headers)
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise RuntimeError("--resign-aws: botocore found no AWS credentials to sign with")
    kept = [(name, value) for name, value in headers if name.lower() not in _SIGNATURE_HEADERS]
    request = AWSRequest(method=method, url=url, data=body, headers=dict(kept))
    SigV4Auth(credentials.get_frozen_credentials(), scope.group(2), scope.group(1)).add_auth(request)
    return list(request.headers.items())
