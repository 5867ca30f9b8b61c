"""The one place that talks to boto3: EC2 clients, and AWS failures turned into CloudError.

Every EC2 call elsewhere goes through :func:`aws_call`, which maps botocore errors to one-line
messages: missing credentials or a bad region say which and how to set it; quota and capacity
errors carry AWS's own message, what the lab created so far and that ``envctl cloud down``
removes it. ``ENVCTL_AWS_ENDPOINT_URL`` points the client elsewhere (moto, LocalStack).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    WaiterError,
)

from envctl.errors import CloudError
from envctl.validate import env_value, validate_region

CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run 'aws configure'"
)
_CREDENTIAL_CODES = {
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "RequestExpired", "UnrecognizedClientException", "AccessDenied",
}
_QUOTA_CODES = {
    "InstanceLimitExceeded", "InsufficientInstanceCapacity", "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded", "InsufficientCapacity", "SpotMaxPriceTooLow",
    "ResourceLimitExceeded", "RulesPerSecurityGroupLimitExceeded", "SecurityGroupLimitExceeded",
    "KeyPairLimitExceeded", "VolumeLimitExceeded", "MaxIOPSLimitExceeded", "Unsupported",
    "InsufficientFreeAddressesInSubnet", "PendingVerification",
}


class AwsCallFailed(CloudError):
    """An EC2 call failed. ``action`` is what envctl was doing, ``code`` AWS's error code."""

    def __init__(self, action: str, code: str, message: str, hint: str | None = None) -> None:
        self.action, self.code = action, code
        super().__init__(f"{action} failed ({code}): {message}", hint)


def ec2_client(region: str, *, profile: str | None = None, endpoint_url: str | None = None) -> Any:
    """An EC2 client for ``region``; checks the region name and that credentials exist."""
    endpoint_url = endpoint_url or env_value("ENVCTL_AWS_ENDPOINT_URL") or None
    region = validate_region(region, "AWS region") if region else region  # before boto3 sees it
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except BotoCoreError as exc:  # e.g. ProfileNotFound
        raise CloudError(f"AWS profile problem: {exc}", CREDENTIALS_HINT) from exc
    if not region:
        raise CloudError("no AWS region given", "pass --region (e.g. us-east-2) or set AWS_DEFAULT_REGION")
    known = session.get_available_regions("ec2")
    if endpoint_url is None and known and region not in known:
        raise CloudError(
            f"unknown AWS region '{region}'",
            "pass --region with one of: " + ", ".join(sorted(known)),
        )
    if session.get_credentials() is None:
        raise CloudError(f"no AWS credentials found (region {region})", CREDENTIALS_HINT)
    return session.client(
        "ec2", endpoint_url=endpoint_url,
        config=Config(retries={"max_attempts": 8, "mode": "adaptive"}, user_agent_extra="envctl"),
    )


@contextmanager
def aws_call(action: str, *, lab: str | None = None, created: Sequence[str] = ()) -> Iterator[None]:
    """Run EC2 calls for ``action``; turn botocore failures into CloudError lines.

    ``created`` lists what the lab holds so far, reported with quota and capacity errors.
    """
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, message = str(err.get("Code", "Unknown")), str(err.get("Message", exc))
        if code in _CREDENTIAL_CODES:
            raise AwsCallFailed(action, code, message, f"check the credentials and their permissions; {CREDENTIALS_HINT}") from exc
        if code in _QUOTA_CODES or code.endswith("LimitExceeded"):
            so_far = ", ".join(created) if created else "nothing"
            down = f"'envctl cloud down --lab {lab}'" if lab else "'envctl cloud down'"
            raise AwsCallFailed(
                action, code, message,
                f"created so far: {so_far}; {down} removes it (or retry with another --instance-type / --region)",
            ) from exc
        raise AwsCallFailed(action, code, message) from exc
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise CloudError(f"{action}: no usable AWS credentials ({exc})", CREDENTIALS_HINT) from exc
    except NoRegionError as exc:
        raise CloudError(f"{action}: no AWS region set", "pass --region or set AWS_DEFAULT_REGION") from exc
    except EndpointConnectionError as exc:
        raise CloudError(f"{action}: cannot reach the EC2 endpoint ({exc})", "check the --region name and the network") from exc
    except WaiterError as exc:
        raise CloudError(f"{action}: gave up waiting ({exc})", "see the EC2 console; 'envctl cloud down' removes the lab") from exc
