# nlme's fit of the multiple-dose data of this folder (in nlme's layout, which
# benchmarks/multidose_data.py writes beside the NONMEM one) by its one-compartment multiple-dose model function quinModel, ML, the CRCL effect inside the
# model function (benchmarks/bench_multidose.py says why), from the start values of
# examples/multidose/multidose.model. Writes multidose_N150_nlme_fit.csv.
#   Rscript multidose_nlme.R <nlme-layout csv> <output csv>
suppressMessages(library(nlme))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
d$lcr <- log(d$CRCL / 80)
d <- groupedData(conc ~ time | Subject, data = d)
qm2 <- function(Subject, time, conc, dose, interval, lV, lKa, lCl, bcr, lcr)
  quinModel(Subject, time, conc, dose, interval, lV, lKa, lCl + bcr * lcr)
f <- nlme(conc ~ qm2(Subject, time, conc, dose, interval, lV, lKa, lCl, bcr, lcr),
  data = d, fixed = list(lV ~ 1, lKa ~ 1, lCl ~ 1, bcr ~ 1), random = pdDiag(lV + lCl ~ 1),
  groups = ~Subject, start = list(fixed = c(5.2, -0.1, 2.2, 0.75)),
  na.action = na.pass, naPattern = ~ !is.na(conc), method = "ML")
tt <- summary(f)$tTable
vc <- as.numeric(VarCorr(f)[, "Variance"])
out <- data.frame(
  name = c("m2ll", rownames(tt), "var_lV", "var_lCl", "sigma2"),
  estimate = c(-2 * as.numeric(logLik(f)), tt[, "Value"], vc),
  se = c(NA, tt[, "Std.Error"], NA, NA, NA))
write.csv(out, args[2], row.names = FALSE)
cat(R.version.string, "nlme", as.character(packageVersion("nlme")), "\n")
