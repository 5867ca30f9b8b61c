"""Backends that run containers: the local Docker engine here, EC2 hosts in ``ec2``/``lab``."""
