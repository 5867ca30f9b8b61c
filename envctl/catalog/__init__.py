"""The site catalog: ``sites.yaml`` turned into validated, frozen, typed objects.

This package is the only reader of the catalog YAML. Every problem found (unknown key, wrong type, missing
field, duplicate port, unknown reference) is reported in one ``CatalogError`` that names the file, the path
inside it (``sites.gitlab.services.web.ports.public``) and what is expected.

- :mod:`envctl.catalog.model` — the typed objects (:class:`Catalog`, :class:`Site`, services, flavors,
  logins, probes, fingerprint queries, reset tiers) and their cross-checks;
- :mod:`envctl.catalog.load` — reading the YAML safely and validating it (:func:`load_catalog`);
- :mod:`envctl.catalog.render` — templates rendered for one deployment (:class:`Deployment`, :class:`Renderer`).

Example::

    cat = load_catalog()
    cat.site("gitlab").entry_service.ports.public   # 8023
"""
from __future__ import annotations

from envctl.catalog.load import CATALOG_MAX_BYTES, CATALOG_MAX_DEPTH, CATALOG_MAX_NODES, load_catalog
from envctl.errors import CatalogError
from envctl.catalog.model import (BUILTIN, Account, Artifact, Benchmark, Catalog, Extract, Flavor, HeaderLogin, Health, HttpLogin,
                                  InPlace, Login, LoginField, Ports, Probe, Query, Reset, Service, ServiceFlavor, Site,
                                  Source, Step, Tier, Volume, dependency_order)
from envctl.catalog.render import Deployment, Renderer, describe

__all__ = ["load_catalog", "Catalog", "Site", "Service", "ServiceFlavor", "Flavor", "Step", "Probe", "Health", "Query",
           "Reset", "InPlace", "Login", "LoginField", "HttpLogin", "HeaderLogin", "Account", "Artifact", "Source", "Extract", "Ports",
           "Volume", "Tier", "Benchmark", "BUILTIN", "Deployment", "Renderer", "describe", "dependency_order", "CATALOG_MAX_BYTES",
           "CATALOG_MAX_DEPTH", "CATALOG_MAX_NODES", "CatalogError"]
