# nlme's Loblolly data (R's datasets) in NONMEM layout, and nlme's ML fit of the asymptotic
# regression with a full 3x3 random-effect block (pdSymm): its Omega is nearly singular
# (eigenvalues 3e-11 to 41). Usage: Rscript loblolly_nlme.R loblolly.csv loblolly_nlme_fit.csv
suppressMessages(library(nlme))
args <- commandArgs(trailingOnly = TRUE)
L <- as.data.frame(Loblolly); L$Seed <- as.character(L$Seed); L <- L[order(L$Seed, L$age), ]
write.csv(data.frame(ID = L$Seed, TIME = L$age, DV = L$height), args[1], row.names = FALSE)
Lg <- groupedData(height ~ age | Seed, data = data.frame(Seed = L$Seed, age = L$age, height = L$height))
fm <- nlme(height ~ Asym + (R0 - Asym) * exp(-exp(lrc) * age), data = Lg,
           fixed = Asym + R0 + lrc ~ 1, random = pdSymm(Asym + R0 + lrc ~ 1),
           start = c(Asym = 103, R0 = -8.5, lrc = -3.3), method = "ML")
om <- as.matrix(pdMatrix(fm$modelStruct$reStruct[[1]]) * fm$sigma^2)
fx <- fixef(fm)
out <- data.frame(
  name = c("m2ll", "sigma", names(fx), paste0("omega_", c("11", "21", "22", "31", "32", "33"))),
  value = c(-2 * as.numeric(logLik(fm)), fm$sigma, fx,
            om[1, 1], om[2, 1], om[2, 2], om[3, 1], om[3, 2], om[3, 3]))
write.csv(format(out, digits = 17), args[2], row.names = FALSE)
