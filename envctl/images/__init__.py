"""Where images come from: local builds (mini flavor, proxy, homepage), registry pulls and tarballs."""
