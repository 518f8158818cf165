// errand dashboard: live reload (pages that ask for it, while the "live"
// box is ticked) and confirmation of destructive forms. The pages work
// without it.
(function () {
  "use strict";
  var params = new URLSearchParams(location.search);
  if (params.has("done")) {
    // The banner after an action is shown once, not on every reload.
    params.delete("done");
    params.delete("n");
    var q = params.toString();
    history.replaceState(null, "", location.pathname + (q ? "?" + q : ""));
  }

  var every = Number(document.body.dataset.refresh || 0);
  var box = document.getElementById("live");
  var timer = 0;
  function schedule() {
    clearTimeout(timer);
    if (every > 0 && (!box || box.checked)) {
      timer = setTimeout(function () { location.reload(); }, every * 1000);
    }
  }
  if (box) {
    try { box.checked = localStorage.getItem("errand-live") !== "off"; } catch (e) {}
    box.addEventListener("change", function () {
      try { localStorage.setItem("errand-live", box.checked ? "on" : "off"); } catch (e) {}
      schedule();
    });
  }
  schedule();

  document.addEventListener("submit", function (e) {
    var msg = e.target.dataset.confirm;
    if (msg && !confirm(msg)) {
      e.preventDefault();
      return;
    }
    clearTimeout(timer); // no reload under a form being sent
  });
})();
