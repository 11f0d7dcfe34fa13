$PROBLEM PHENOBARB SIMPLE MODEL (Grasela and Donn 1985; the NONMEM pheno example)
; the bundled deepnlme data set: deepnlme.datasets.path("phenobarbital")
$INPUT ID TIME AMT DV EVID MDV CMT WGT APGR APGRLT5=DROP
$DATA phenobarb_nm.csv IGNORE=@
$SUBROUTINE ADVAN1 TRANS2

$PK
TVCL=THETA(1)*WGT
TVV=THETA(2)*WGT
IF(APGR.LT.5) TVV=TVV*(1+THETA(3))
CL=TVCL*EXP(ETA(1))
V=TVV*EXP(ETA(2))
S1=V

$ERROR
W=F
Y=F+W*EPS(1)
IPRED=F         ;  individual-specific prediction
IRES=DV-IPRED   ;  individual-specific residual
IWRES=IRES/W    ;  individual-specific weighted residual

$THETA (0,0.0047) ; CL
$THETA (0,0.98) ; V
$THETA (-.99,.16) ; APGR effect on V
$OMEGA DIAGONAL(2)
 0.03  ;       IVCL
 0.03  ;        IVV
$SIGMA 0.0121

$ESTIMATION METHOD=1 INTERACTION
$COVARIANCE UNCONDITIONAL
$TABLE ID TIME DV MDV EVID IPRED IWRES NOPRINT ONEHEADER FILE=sdtab1
