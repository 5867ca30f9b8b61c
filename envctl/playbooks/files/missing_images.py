"""Print (JSON) the Docker images of the selected sites and flavor that this host lacks.

Run on a lab host with envctl's own Python: ``missing_images.py FLAVOR all|SITE,SITE``. The
playbook uses it to decide honestly whether the image step has anything to do.
"""
import json
import subprocess
import sys

from envctl.catalog import load_catalog


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
    missing = sorted(i for i in images if subprocess.run(
        ["docker", "image", "inspect", i], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0)
    print(json.dumps(missing))


if __name__ == "__main__":
    main()
