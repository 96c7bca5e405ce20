// The approvals desk: reload when the store changes (another person decided, a new approval
// came), unless the person is typing a note. No data is ever written into the page by script.
(function () {
  "use strict";
  var version = document.body.getAttribute("data-version");
  if (!version) { return; }
  function busy() {
    var active = document.activeElement;
    if (active && active.tagName === "INPUT" && active.type === "text") { return true; }
    var notes = document.querySelectorAll("form.release input[name=note]");
    for (var i = 0; i < notes.length; i++) { if (notes[i].value) { return true; } }
    return document.querySelector("details.whole[open]") !== null;
  }
  function poll() {
    fetch("/state", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (state) {
        if (!state || !state.version || state.version === version) { return; }
        if (busy()) { document.getElementById("changed").hidden = false; return; }
        window.location.replace("/");
      })
      .catch(function () { /* the desk stopped: leave the page as it is */ });
  }
  window.setInterval(poll, 2000);
  var forms = document.querySelectorAll("form[action='/decide'], form[action='/recheck']");
  for (var i = 0; i < forms.length; i++) {
    forms[i].addEventListener("submit", function (event) {
      var button = event.target.querySelector("button");
      if (button) { window.setTimeout(function () { button.disabled = true; }, 0); }
    });
  }
}());
