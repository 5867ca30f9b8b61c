// Mini stand-in of WebArena's app/assets/javascripts/index/directions/fossgis_osrm.js: the browser asks
// OSRM itself, on OSM.FOSSGIS_OSRM_URL (config/settings.yml's fossgis_osrm_url, written by the configure
// step) with the vehicle's port appended, and draws the summary from the answer.
var vehicleTypePortMapping = {"car": "5000", "bike": "5001", "foot": "5002"};

function fossgisOsrmUrl(vehicle) {
  return OSM.FOSSGIS_OSRM_URL + vehicleTypePortMapping[vehicle] + "/";
}

function formatDistance(m) {  // as the directions panel formats it
  if (m < 1000) return Math.round(m) + "m";
  if (m < 10000) return (m / 1000).toFixed(1) + "km";
  return Math.round(m / 1000) + "km";
}

function formatTime(s) {
  var minutes = Math.round(s / 60), rest = minutes % 60;
  return Math.floor(minutes / 60) + ":" + (rest < 10 ? "0" : "") + rest;
}

// from, to: [lat, lon]
function fossgisOsrmRoute(vehicle, from, to) {
  var summary = document.getElementById("routing_summary"), error = document.getElementById("routing_error");
  var url = fossgisOsrmUrl(vehicle) + "route/v1/driving/" + from[1] + "," + from[0] + ";" + to[1] + "," + to[0] +
    "?overview=false&steps=true";
  function fail(text) { error.textContent = text; error.hidden = false; }
  return fetch(url).then(function (r) { return r.json(); }).then(function (res) {
    if (res.code !== "Ok" || !res.routes || !res.routes.length) {
      fail("Could not find a route between those two places");
      return;
    }
    var route = res.routes[0];
    summary.textContent = "Distance: " + formatDistance(route.distance) + ". Time: " + formatTime(route.duration) + ".";
    summary.hidden = false;
  }, function () {
    fail("An error occurred while communicating with " + fossgisOsrmUrl(vehicle));
  });
}
