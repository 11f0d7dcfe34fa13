# nlme's fit of its Quinidine data, as benchmarks/quinidine_data.py writes it (glyco moved to
# the next dose record, so that quinModel and record-to-record propagation describe one
# system): quinModel with the glycoprotein effect inside the model function (as
# benchmarks/bench_multidose.py says why), one random effect on log CL, ML, from the start
# values of examples/quinidine/quinidine.model. Writes the -2LL, the fixed effects with their
# SEs and the variances to <output csv>; prints the nlme() call's elapsed seconds (median of
# <repeats>, default 1) after "TIME".
#   Rscript quinidine_nlme.R <nlme-layout csv> <output csv> [repeats]
suppressMessages(library(nlme))
args <- commandArgs(trailingOnly = TRUE)
nrep <- if (length(args) > 2) as.integer(args[3]) else 1L
d <- read.csv(args[1])
d <- groupedData(conc ~ time | Subject, data = d)
qm2 <- function(Subject, time, conc, dose, interval, lV, lKa, lCl, bg, glyco)
  quinModel(Subject, time, conc, dose, interval, lV, lKa, lCl + bg * glyco)
fitfun <- function()
  nlme(conc ~ qm2(Subject, time, conc, dose, interval, lV, lKa, lCl, bg, glyco),
    data = d, fixed = list(lV ~ 1, lKa ~ 1, lCl ~ 1, bg ~ 1), random = lCl ~ 1,
    groups = ~Subject, start = list(fixed = c(5, -0.3, 2, 0)),
    na.action = na.pass, naPattern = ~ !is.na(conc), method = "ML")
times <- numeric(0)
for (i in seq_len(nrep)) times <- c(times, system.time(f <- fitfun())[["elapsed"]])
tt <- summary(f)$tTable
vc <- as.numeric(VarCorr(f)[, "Variance"])
out <- data.frame(
  name = c("m2ll", rownames(tt), "var_lCl", "sigma2"),
  estimate = c(-2 * as.numeric(logLik(f)), tt[, "Value"], vc),
  se = c(NA, tt[, "Std.Error"], NA, NA))
write.csv(out, args[2], row.names = FALSE)
cat("TIME", median(times), "\n")
cat(R.version.string, "nlme", as.character(packageVersion("nlme")), "\n")
