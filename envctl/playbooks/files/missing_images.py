"""Print (JSON) the Docker images of the selected sites and flavor that this host lacks.

Run on a lab host with envctl's own Python: ``missing_images.py FLAVOR all|SITE,SITE``. The
playbook uses it to decide honestly whether the image step has anything to do.
"""
import json
import sys

from envctl.catalog import load_catalog
from envctl.provision.docker import image_exists


def main() -> None:
    flavor, which = sys.argv[1], sys.argv[2]
    catalog = load_catalog()
    names = list(catalog.sites) if which == "all" else [s for s in which.split(",") if s]
    images: set[str] = set()
    for name in names:
        site = catalog.site(name)
        for svc in site.services.values():
            if flavor in svc.flavors:
                images.add(svc.flavors[flavor].image)
    missing = sorted(i for i in images if not image_exists(i))
    print(json.dumps(missing))


if __name__ == "__main__":
    main()
