/* Small behaviours of the portal's pages, kept in a file: the Content-Security-Policy allows
   no inline scripts or event handlers (onclick, onchange). */
(function () {
  "use strict";

  // <form data-goto-prefix="/leases/calendar/">: choosing in its <select> opens PREFIX + value + "/".
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-goto-prefix]");
    if (form && event.target.value) {
      window.location = form.dataset.gotoPrefix + encodeURIComponent(event.target.value) + "/";
    }
  });

  // <a data-print>: print the page.
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("[data-print]");
    if (link) {
      event.preventDefault();
      window.print();
    }
  });

  // <form data-confirm="Remove alice?">: a destructive form asks before it is sent — with the
  // browser's own confirm, unless the page has its confirmation dialog (#confirm-dialog),
  // whose handler asks instead.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest && event.target.closest("form[data-confirm]");
    if (!form || document.getElementById("confirm-dialog")) {
      return;
    }
    if (!window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();
