"""The local engine: Docker containers, the proxy, ports and instance settings. Cloud labs are in :mod:`envctl.cloud`."""
