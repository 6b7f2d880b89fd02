/* Draws the plotly charts of a page (portal/charts.py writes each as
   <div class="plotly-chart" data-figure="…" data-config="…">), also in content htmx swaps in
   (the lease page's polled utilisation chart). A file, not plotly's inline script: the
   Content-Security-Policy allows no inline scripts. */
(function () {
  "use strict";

  function draw(root) {
    if (!window.Plotly || !root || !root.querySelectorAll) {
      return;
    }
    var charts = Array.prototype.slice.call(root.querySelectorAll("div.plotly-chart[data-figure]"));
    if (root.matches && root.matches("div.plotly-chart[data-figure]")) {
      charts.push(root);
    }
    charts.forEach(function (el) {
      if (el.dataset.drawn) {
        return;
      }
      el.dataset.drawn = "1";
      var figure = JSON.parse(el.dataset.figure);
      var config = JSON.parse(el.dataset.config || "{}");
      window.Plotly.newPlot(el, figure.data || [], figure.layout || {}, config);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    draw(document);
  });
  document.addEventListener("htmx:load", function (event) {
    draw(event.target);
  });
})();
